"""Measurements that take minutes to hours, apart from the package and the tests: `python -m benchmarks.NAME`."""
