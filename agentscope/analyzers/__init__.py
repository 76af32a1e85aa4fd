"""Analyzers: critical path per task and evidence-based bottleneck classification.

They read from the store and return data; they never print. Not built yet: see the analyze
issue.
"""
