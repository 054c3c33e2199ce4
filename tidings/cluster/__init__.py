"""Clustering: routes between servers (route.py) and their management (cluster.py)."""
