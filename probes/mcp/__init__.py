"""Helpers of the ``mcp_endpoint`` probe (``probes/mcp_endpoint.py``), lowest first:

* ``sse``: SSE framing; ``_jsonrpc``: JSON-RPC messages, strict decoding, matching;
  ``_transport``: what both HTTP transports share (``Reply``, ``WireError``);
* ``wire``: the streamable HTTP transport (and every transport name, re-exported);
  ``_legacy``: the 2024-11-05 HTTP+SSE transport;
* ``_model``: what a handshake is asked and learns; ``_surface``: the rest of the tool surface
  (instructions, prompts/list, resources/list) and the ``Surface`` a run reports;
  ``_tools``: tools/list and tools/call;
  ``handshake``: the conversation in each era; ``auth``: static headers and OAuth;
* ``_params``: the check's configuration; ``_report``: a run's observations, verdict, details.
"""
