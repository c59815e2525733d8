"""Speed benchmarks: `python -m benchmarks` runs them all (`make bench`); each module runs alone."""
