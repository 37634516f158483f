% An operator graph: data only, read with read_term/2 and never consulted.
% It names handlers of the plugin's trusted registry (tool/2, tool/3) and
% gives them data. Load it with
%   --graphs-dir examples/machinespirit/graphs \
%   --graph-pin tool_pipeline=$(sha256sum examples/machinespirit/graphs/tool_pipeline.pl | cut -d' ' -f1)
graph(tool_pipeline,
      [ description("Write a file, wait, read it back: tools only, no model."),
        state([ field(read_back, json, null, replace) ]),
        nodes([ node(write, tool('workspace.write', json{path: "greeting.txt", content: "hello from a graph"})),
                node(wait, tool('time.sleep', json{seconds: 1})),
                node(read, tool('workspace.read', json{path: "greeting.txt"}, read_back))
              ]),
        edges([ edge(start, write),
                edge(write, wait),
                edge(wait, read),
                edge(read, end)
              ]),
        limits([ max_node_executions(10), node_seconds(30) ]),
        output([read_back])
      ]).
