"""Build hook for the optional compiled fast path; everything else is in pyproject.toml.

The extension is optional: when no C compiler is available the install still succeeds and
tidings runs in pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("tidings.protocol._speedups", ["tidings/protocol/_speedups.c"], optional=True),
    ]
)
