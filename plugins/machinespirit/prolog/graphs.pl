/*  MACHINE-SPIRIT: the graphs shipped with the plugin.

    rlm              the recursive-language-model loop over typed JSON
                     plans (rlm_plan.pl);
    rlm_goals        the same loop with model-written Prolog goals
                     (rlm.pl); registered only with the worker's goal
                     mode on (--rlm-goal-mode), off by default;
    plan_act_review  plan -> act -> review with a conditional router and a
                     bounded retry loop; it calls no model at all, which
                     shows the runtime does not depend on one;
    ask_human        an interrupt: asks the task's principal the task's
                     goal as a question, pauses until they answer
                     (taskhost approve ID --value JSON), and writes the
                     answer to answer.json.
*/
:- module(ms_graphs, []).
:- use_module(registry).

ms_registry:graph_spec(
    graph(rlm,
          [ description("Recursive language model: the root model explores a large context it never sees whole, through typed JSON plans (machinespirit.plan/1) that trusted Prolog validates and interprets."),
            state([ field(context_length, integer, 0, replace),
                    field(prefix, string, "", replace),
                    field(iteration, integer, 0, sum),
                    field(repairs, integer, 0, replace),
                    field(recent, list(string), [], replace),
                    field(answer, optional(string), null, replace)
                  ]),
            nodes([ node(probe, rlm_probe),
                    node(iterate, rlm_plan_iterate, [max_visits(30)]),
                    node(give_up, fail_graph(rlm_iterations_exhausted)),
                    node(invalid, rlm_plan_give_up)
                  ]),
            edges([ edge(start, probe),
                    edge(probe, iterate),
                    conditional(iterate, rlm_plan_router,
                                [ route(continue, iterate),
                                  route(done, end),
                                  route(exhausted, give_up),
                                  route(invalid, invalid)
                                ]),
                    edge(give_up, end),
                    edge(invalid, end)
                  ]),
            limits([ max_node_executions(40),
                     max_visits(30),
                     node_seconds(300),
                     node_inferences(200_000_000)
                   ]),
            output([answer]),
            % A plan's recurse step runs this graph one level deeper.
            subgraphs([rlm])
          ])).

ms_registry:graph_spec(
    graph(rlm_goals,
          [ description("Recursive language model, goal mode (off by default: --rlm-goal-mode): the root model writes Prolog goals, checked against an allow-list and run sandboxed."),
            state([ field(context_length, integer, 0, replace),
                    field(prefix, string, "", replace),
                    field(iteration, integer, 0, sum),
                    field(recent, list(string), [], replace),
                    field(answer, optional(string), null, replace)
                  ]),
            nodes([ node(probe, rlm_probe),
                    node(iterate, rlm_iterate, [max_visits(30)]),
                    node(give_up, rlm_give_up)
                  ]),
            edges([ edge(start, probe),
                    edge(probe, iterate),
                    conditional(iterate, rlm_router,
                                [ route(continue, iterate),
                                  route(done, end),
                                  route(exhausted, give_up)
                                ]),
                    edge(give_up, end)
                  ]),
            limits([ max_node_executions(40),
                     max_visits(30),
                     node_seconds(300),
                     node_inferences(200_000_000)
                   ]),
            output([answer]),
            % Only with the worker's goal mode on (see main.pl).
            subgraphs([rlm_goals])
          ])).

ms_registry:graph_spec(
    graph(plan_act_review,
          [ description("Plan, act, review with a bounded retry loop. No model: tools only."),
            state([ field(plan, list(string), [], replace),
                    field(attempt, integer, 0, sum),
                    field(log, list(string), [], append),
                    field(verdict, atom, pending, replace)
                  ]),
            nodes([ node(plan, par_plan),
                    node(act, par_act, [max_visits(5)]),
                    node(review, par_review, [max_visits(5)])
                  ]),
            edges([ edge(start, plan),
                    edge(plan, act),
                    edge(act, review),
                    conditional(review, by_field(verdict),
                                [ route(retry, act),
                                  route(accepted, end),
                                  route(rejected, end)
                                ])
                  ]),
            limits([ max_node_executions(20),
                     node_seconds(30),
                     node_inferences(10_000_000)
                   ]),
            output([verdict, attempt, plan, log])
          ])).

ms_registry:graph_spec(
    graph(ask_human,
          [ description("Asks the task's principal its goal as a question, pauses until they answer with a JSON value, writes the answer to answer.json."),
            state([ field(answer, json, null, replace) ]),
            nodes([ node(ask, input_goal(answer)),
                    node(record, write_json(answer, "answer.json"))
                  ]),
            edges([ edge(start, ask),
                    edge(ask, record),
                    edge(record, end)
                  ]),
            limits([ max_node_executions(4),
                     node_seconds(30)
                   ]),
            output([answer])
          ])).
