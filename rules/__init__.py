"""The built-in rules, one module per rule, written with the public API in ``traceinsight.rule_api`` only.

This folder is installed as the package ``traceinsight.rules`` and each rule is registered in the
``traceinsight.rules`` entry-point group (pyproject.toml), exactly as a third-party plugin would be.
"""
