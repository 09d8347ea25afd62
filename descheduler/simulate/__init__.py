"""``descheduler simulate``: the planner run offline over files, for audits and what-if studies."""
