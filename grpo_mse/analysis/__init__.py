"""Analysis: group-size advisor, exact theory on enumerable cases, Algorithm-1 simulation."""
