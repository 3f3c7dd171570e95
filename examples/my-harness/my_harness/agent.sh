#!/bin/bash
# A tiny shell agent: asks the model for one shell command at a time (a "bash" tool), runs
# it in the workspace and sends back its output; stops when the model answers without a tool
# call, or after $MAX_TURNS turns. It talks to any OpenAI-compatible endpoint:
# OPENAI_BASE_URL, OPENAI_API_KEY, MODEL; the task text is in $TASK_FILE. Needs bash, curl
# and python3 (for JSON).
set -euo pipefail

json() { python3 -c "import json, sys; $1" "${@:2}"; }

messages=$(json 'print(json.dumps([{"role": "user", "content": open(sys.argv[1]).read()}]))' "$TASK_FILE")
for _ in $(seq "$MAX_TURNS"); do
    request=$(json '
tool = {"type": "function", "function": {"name": "bash", "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}}
print(json.dumps({"model": sys.argv[2], "messages": json.loads(sys.argv[1]), "tools": [tool]}))' \
        "$messages" "$MODEL")
    reply=$(curl -sS --fail --max-time 300 "$OPENAI_BASE_URL/chat/completions" \
        -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" \
        -d "$request")
    message=$(json 'print(json.dumps(json.loads(sys.argv[1])["choices"][0]["message"]))' "$reply")
    call=$(json '
calls = json.loads(sys.argv[1]).get("tool_calls") or []
try:
    print(json.loads(calls[0]["function"]["arguments"])["command"] if calls else "")
except (ValueError, KeyError, TypeError):
    print("echo the tool call had no command")' "$message")
    if [ -z "$call" ]; then
        exit 0 # an answer without a tool call: done
    fi
    output=$(bash -c "$call" 2>&1 | head -c 4000 || true)
    messages=$(json '
messages, message, output = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
messages.append(message)
messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": output})
print(json.dumps(messages))' "$messages" "$message" "$output")
done
