"""The one name the gateway and the execution relay share: the header that says which Ray node a relayed
request came from.

Why a module of its own: the relay runs in the executor's worker, which must import neither the
system under test nor the scorer; this module imports nothing, so both sides can name the header.
"""

#: "<the gateway's route token> <Ray node id>", added by the relay's bridge on the gateway's socket; the
#: gateway believes it only with its token (research/execution/node_llm.py serves that node)
ROUTE_HEADER = "X-Memsys-Node"
