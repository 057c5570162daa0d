"""Paths the Python tests use (ctest passes them; the defaults are the
repository's): the library under test comes from KVFOLD_LIBRARY (a build's)
or the installed package, the CLI to compare with from KVFOLD_CLI."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KVFOLD_BUILD", os.path.join(ROOT, "build"))
CLI = os.environ.get("KVFOLD_CLI", os.path.join(BUILD, "kvfold"))
MODEL = os.environ.get("KVFOLD_TEST_MODEL", os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
FIXTURES = os.path.join(BUILD, "fixtures")


def need(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (make models / the kvf_fixtures test make it)")
    return path


@pytest.fixture(scope="session")
def model():
    import kvfold
    with kvfold.Model(need(MODEL), threads=1) as m:
        yield m


@pytest.fixture(scope="session")
def tiny():
    """The llama fixture: a tiny random model, fast to open and run."""
    import kvfold
    with kvfold.Model(need(os.path.join(FIXTURES, "llama-f32.gguf")), threads=1) as m:
        yield m
