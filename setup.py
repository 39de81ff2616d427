"""Package list for setuptools; all other metadata is in pyproject.toml.

``gpu_mr`` and its subpackages are found under gpu_mr/; the top-level kernels/
folder (and any subpackage of it) installs as ``gpu_mr.kernels`` through the
``package-dir`` mapping in pyproject.toml. Finding them here, rather than
listing them in pyproject.toml, keeps a new subpackage from being left out of
the wheel.
"""

from setuptools import find_packages, setup

packages = find_packages(include=["gpu_mr", "gpu_mr.*"])
packages += ["gpu_mr.kernels"] + [
    "gpu_mr.kernels." + name for name in find_packages("kernels")
]

setup(packages=packages)
