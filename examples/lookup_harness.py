"""An outside agent for the lookup task, written only against the official `openai` client.

It knows nothing of tandem: it keeps its own chat history, offers a `lookup` tool, runs the tool
itself and scores its own answer (the rule of tandem/envs/lookup.py: 0 without a lookup or an
answer, else 0.2 + 0.1 for a digit + 0.7 for the secret digit). tandem trains it both ways:

    in process   rollout.harness = "examples/lookup_harness.py:run"  (configs/lookup_harness.toml)
    as a program rollout.harness_command = "python examples/lookup_harness.py"  (OPENAI_BASE_URL and
                 OPENAI_API_KEY in its environment, the row on stdin, {"reward": ...} on stdout)

Each reply is one token on the tiny CPU model (max_tokens = 1): the tool call, or the answer.
"""

from __future__ import annotations

import asyncio
import json
import sys

import openai

LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Return the secret digit.",
                                            "parameters": {"type": "object", "properties": {}}}}
MAX_TURNS = 3
REPEAT = 8
"""The tool writes the secret this many times (as the lookup environment's default does)."""


async def run(client: openai.AsyncOpenAI, row: dict) -> tuple[float, dict]:
    secret = str(row["secret"])
    messages = [{"role": "user", "content": row["prompt"]}]
    looked_up, answer = 0, ""
    for turn in range(MAX_TURNS):
        response = await client.chat.completions.create(model="policy", messages=messages, tools=[LOOKUP],
                                                        max_tokens=1)
        reply = response.choices[0].message
        if not reply.tool_calls:
            answer = (reply.content or "").strip()
            break
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls[:1]:
            looked_up += call.function.name == "lookup"
            result = secret * REPEAT if call.function.name == "lookup" else f"Error: no tool {call.function.name}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return score(secret, looked_up, answer)


def score(secret: str, looked_up: int, answer: str) -> tuple[float, dict]:
    info = {"looked_up": looked_up, "answer": answer[:20]}
    if not looked_up or not answer:
        return 0.0, info
    first = answer[0]
    return 0.2 + 0.1 * first.isdigit() + 0.7 * (first == secret), info


def main() -> None:
    row = json.load(sys.stdin)
    reward, info = asyncio.run(run(openai.AsyncOpenAI(), row))  # OPENAI_BASE_URL / OPENAI_API_KEY from tandem
    print(json.dumps({"reward": reward, "info": info}))


if __name__ == "__main__":
    main()
