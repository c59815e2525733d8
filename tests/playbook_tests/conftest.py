"""The orchestration tests' fixtures (toy studies, output folders) serve the procedures too."""

from tests.orchestrate_tests.conftest import output_dir

__all__ = ["output_dir"]
