"""Everything that talks to the Kubernetes API; the only package that imports ``kubernetes``.

Modules: ``connection`` (find the cluster), ``api`` (rate-limited HTTP + JSON), ``cache`` (list-then-watch
snapshot source), ``evict`` (Eviction API / delete, dry run), ``events`` (Events on pods), ``leader``
(Lease-based leader election), ``metrics_api`` (metrics.k8s.io reads).
"""
