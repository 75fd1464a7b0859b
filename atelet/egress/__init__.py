"""The node side of egress (issue 28): a per-node Squid applying each actor's egress policy.

docs/egress-proxy.md has the measurements behind the choice. The path of one connection:

1. A sandbox connects out: to ``http://169.254.100.1:3128`` (its ``HTTP_PROXY``/``HTTPS_PROXY``,
   ``atelet.egress.sandbox``), or straight to an address on port 80 or 443 (software ignoring
   the proxy settings; a sandbox has no DNS, so it can only dial addresses). ``rules`` redirects
   either to Squid's ports on the worker's own gateway; every other connection is refused at
   once (``rules``, ``atelet.isolation``).
2. Squid (``squid``, configured by ``squid_config``) asks the atelet about it through its helper
   (``relay``, over ``decision_socket``): which actor runs on the worker with the client's
   address, and whether its policy (``policies``: fetched from the API server, kept a second)
   allows the name asked (Host, CONNECT target, TLS SNI) or address on that port (``decision``).
   An address in the protected networks (``networks``) is refused, and so is a name that Squid
   resolves into them; the kernel refuses Squid's own connections to the node (``rules``).
3. Allowed plain HTTP and spliced TLS go to the destination Squid resolved (through the proxy
   settings) or to the address dialled when its name resolves to it (intercepted). For a host
   with a credential Squid terminates the actor's TLS with a certificate of the egress CA, opens
   its own TLS verified against the upstream CAs, and adds the header with the secret's value
   (``header_slots``), which the sandbox never holds.
4. Denied: a 403 with the reason (for TLS, inside a TLS session of the egress CA, which the
   actor trusts), or the TLS connection closed (intercepted TLS). Squid's access log
   (``access_log``) counts every request and denial per actor and destination
   (``atelet.metrics``) and logs each denial with the actor, the destination and the rule.

``proxy.EgressProxy`` wires these parts; the atelet runs it when ``egress`` is on
(``AteletSettings.egress_on``).
"""
