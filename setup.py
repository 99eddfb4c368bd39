"""Packaging for tstreams-embedded."""

from setuptools import find_packages, setup

DEV = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "ruff>=0.6",
    "redis>=5",
    "matplotlib>=3.8",
    "tqdm>=4.66",
]
SPARK = ["pyspark>=4.2,<5", "pyarrow>=15"]
CLUSTER = ["kazoo>=2.10"]

setup(
    name="tstreams-embedded",
    version="0.1.0",
    description="Transactional, persistent, partitioned queues for exactly-once batch messaging, on LMDB",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tstreams_embedded", "tstreams_embedded.*", "benchmarks", "benchmarks.*"]),
    install_requires=[
        "lmdb>=1.4",
        "msgpack>=1.0",
        "pyzmq>=25",
        "tornado>=6.3",
        "click>=8.1",
        "prometheus-client>=0.20",
    ],
    extras_require={
        "spark": SPARK,
        "cluster": CLUSTER,
        "dev": DEV,
        "all": SPARK + CLUSTER + DEV,
    },
    entry_points={
        "console_scripts": ["tstreams=tstreams_embedded.cli:run"],
        # named after the module, so that `pytest_plugins = [that module]` in a conftest.py
        # finds it already registered instead of registering it twice
        "pytest11": ["tstreams_embedded.testing.pytest_plugin = tstreams_embedded.testing.pytest_plugin"],
    },
)
