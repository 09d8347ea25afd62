"""Plain-data view of the cluster that the planner decides on, and parsers from Kubernetes objects."""
