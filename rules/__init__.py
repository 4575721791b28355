"""The built-in rules, one module per rule, written with the public API in ``traceinsight.rule_api`` only.

This folder ships as the package ``traceinsight.rules``; every public module in it is a rule module, found by
``traceinsight.plugins.builtin_modules`` (a new rule is one new file here, listed nowhere else).
"""
