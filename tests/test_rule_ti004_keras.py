"""TI004 on host-only Keras traces: eligible layers and fallback variants are told apart by their loop bodies."""

from __future__ import annotations

import pytest

import traceinsight

from .conftest import corpus_file


