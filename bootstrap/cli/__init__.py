"""The ``nodesmith`` command line: one module per command, loaded only when it runs.

The engine (``render``, ``serve``, ``vm``, ``image``, ``kubernetes``) never imports from here.
"""
