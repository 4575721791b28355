"""The built-in rules, one module per rule, written with the public API only: ``traceinsight.rule_api`` (and
``rule_api_job`` for cross-rank rules), the helper library ``traceinsight.rulelib`` and the vocabularies
(``patterns``, ``buckets``, ``intervals``, ``masks``); the import contract in pyproject.toml holds them to it.

This folder ships as the package ``traceinsight.rules``; every public module in it is a rule module, found by
``traceinsight.pipeline.plugins.builtin_modules`` (a new rule is one new file here, listed nowhere else).
"""
