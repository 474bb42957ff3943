"""Weighted mixtures of datasets as orders: the tree, schedules, changes and growth."""
