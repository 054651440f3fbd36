"""The full user sweep runs only when asked for (`-m acceptance`): its training cases take most of its time."""

import pytest


def pytest_collection_modifyitems(config, items):
    if "acceptance" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="part of the full user sweep: run it with -m acceptance")
    for item in items:
        if "sweep_full" in item.keywords:
            item.add_marker(skip)
