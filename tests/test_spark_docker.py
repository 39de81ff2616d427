"""The docker/ recipes: what can be checked without building them.

The images cannot be built here (no Docker daemon, no outside network), so
this checks what they rely on: every COPY source exists, the command they
run is a module of the package that parses its arguments, the pins are
exact, and the plugin jar is the Scala 2.13 build that Spark 4 needs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_mr.spark import demo as spark_demo

DOCKER = Path(__file__).resolve().parents[1] / "docker"
REPO = DOCKER.parent
FILES = ["Dockerfile", "Dockerfile.cpu"]


def instructions(name: str) -> list[tuple[str, str]]:
    text = (DOCKER / name).read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("name", FILES)
def test_copy_sources_exist(name):
    copies = [rest.split()[:-1] for word, rest in instructions(name) if word == "COPY"]
    assert copies
    for sources in copies:
        for src in sources:
            assert (REPO / src).exists(), f"{name}: COPY {src} does not exist"


@pytest.mark.parametrize("name", FILES)
def test_pins_are_exact(name):
    args = dict(rest.split("=", 1) for word, rest in instructions(name) if word == "ARG")
    assert args
    for key, value in args.items():
        assert re.fullmatch(r"\d+\.\d+(\.\d+|\.\*)", value), f"{name}: {key}={value} is not pinned"
    base = [rest for word, rest in instructions(name) if word == "FROM"]
    assert len(base) == 1 and ":" in base[0] and "latest" not in base[0]


def test_gpu_image_pairs_spark_4_with_the_scala_2_13_plugin():
    text = (DOCKER / "Dockerfile").read_text()
    assert "rapids-4-spark_2.13" in text and "_2.12" not in text
    assert re.search(r"ARG PYSPARK_VERSION=4\.", text)
    assert "PYSPARK_PYTHON=" in text


@pytest.mark.parametrize("name", FILES)
def test_command_is_the_demo_module(name):
    cmd = [rest for word, rest in instructions(name) if word == "CMD"][-1]
    assert "gpu_mr.spark.demo" in cmd
    demo = REPO / "gpu_mr" / "spark" / "demo.py"
    assert demo.exists()
    with pytest.raises(SystemExit) as info:          # --help parses and exits 0
        spark_demo.main(["--help"])
    assert info.value.code == 0


def test_compose_builds_both_images_from_the_repository_root():
    text = (DOCKER / "compose.yaml").read_text()
    assert "dockerfile: docker/Dockerfile\n" in text
    assert "dockerfile: docker/Dockerfile.cpu" in text
    assert text.count("context: ..") == 2
