"""``nodesmith serve``: bootstrap data over HTTP for machine controllers.

``server`` is the supervisor (sockets, worker processes, signals); ``app`` the ASGI
application; ``auth``, ``budget``, ``log``, ``metrics`` and ``openapi`` one concern each.
The command line that starts it lives in ``bootstrap.cli.serve``.
"""
