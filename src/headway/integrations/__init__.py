"""Integrations: headway where agents run, one small module per framework.

Each imports its framework lazily; a missing extra fails with the ``pip install`` to run.
They share the helpers in ``_common``: the spec of a tool the framework runs, the
idempotency step of a framework's tool call, and the import of an optional dependency.
"""
