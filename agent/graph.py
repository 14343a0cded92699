"""The repair agent as a LangGraph state machine: this module only wires the nodes (`agent.nodes`) to the routers
(`agent.routes`).

    view ─► [reproduce] ─► localize ─► edit ⟲ (tool loop) ─┬─► test ─┬─► submit ─► finalize
                 ▲                          │         ├─► search (FLARE / BESTER) ─► submit | edit
                 └──────────────────────────┴─────────┴─► localize (new traceback) | edit

Every node runs inside `agent.context.run_node`, which checks the budgets (steps, tokens, cost, wall time) first;
a spent budget, an endpoint failure (timeout, 5xx after retries, empty reply) or a dead runtime ends the run, and
every router then goes to `finalize`, which keeps the best patch seen so far.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from langgraph.graph import END, StateGraph
from pinpoint.agent import nodes, routes
from pinpoint.agent.context import AgentContext, NodeFn, run_node
from pinpoint.agent.state import AgentState, initial_state

__all__ = ["build_graph", "initial_state"]


@dataclass(frozen=True)
class Step:
    """One node of the graph: what it does, the router that picks the next node, and the nodes it may pick
    (finalize is always one)."""

    name: str
    node: NodeFn
    router: routes.Router | None
    targets: tuple[str, ...] = ()
    #: budgets are checked before the node runs (view and submit cost nothing; finalize must always run)
    budgeted: bool = True


STEPS = (
    Step("view", nodes.view, routes.after_view, ("test", "reproduce", "localize"), budgeted=False),
    Step("reproduce", nodes.reproduce, routes.after_reproduce, ("localize",)),
    Step("localize", nodes.localize, routes.after_localize, ("edit", "search")),
    Step("edit", nodes.edit, routes.after_edit, ("edit", "test", "submit")),
    Step("test", nodes.test, routes.after_test, ("submit", "search", "localize", "edit")),
    Step("search", nodes.search, routes.after_search, ("submit", "edit")),
    Step("submit", nodes.submit, routes.after_submit, ("edit",), budgeted=False),
    Step("finalize", nodes.finalize, None, budgeted=False),
)


def build_graph(ctx: AgentContext, checkpointer=None):
    """Compile the agent graph over `ctx`; `checkpointer` makes runs resumable by thread id."""
    graph = StateGraph(AgentState)
    for step in STEPS:
        final = step.router is None
        graph.add_node(step.name, functools.partial(run_node, ctx=ctx, name=step.name, node=step.node,
                                                    budgeted=step.budgeted, final=final))
        if final:
            graph.add_edge(step.name, END)
        else:
            router = functools.partial(step.router, cfg=ctx.config)
            graph.add_conditional_edges(step.name, router, [*step.targets, routes.FINALIZE])
    graph.set_entry_point(STEPS[0].name)
    return graph.compile(checkpointer=checkpointer)
