"""Fixtures shared by every test layer.

The simulated NVIDIA driver's fixtures live with the driver (tests/fakenvml/fixtures.py).
"""
from tests.fakenvml.fixtures import *  # noqa: F401,F403  (pytest fixtures)
