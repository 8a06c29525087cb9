"""The agent's prompts, modeled on mini-swe-agent's text-based configuration.

Same contract as mini-swe-agent (config/mini_textbased.yaml, agents/default.py):
- one bash block per reply, found with a regex; zero or several is a format error whose
  message goes back as the next user turn;
- each command runs in a fresh subshell (cd does not persist);
- the observation shows <returncode> and the output, or, past `output_max_chars`, its
  first and last halves with the number of elided characters;
- the episode ends when a command's first output line is the submit sentinel.

Templates are Jinja2 (StrictUndefined) so a prompt file can reorder or extend them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from jinja2 import StrictUndefined, Template

SYSTEM_TEMPLATE = """\
You are a software engineer fixing a bug in a Python repository. You work through a bash shell.

Every reply must contain exactly ONE bash code block with ONE command (or commands joined with && or ||), \
after a short THOUGHT explaining why:

THOUGHT: <your reasoning>

```bash
<command>
```"""

INSTANCE_TEMPLATE = """\
Please fix this issue in the repository in the current directory:

{{task}}

Rules:
1. Every reply has exactly one ```bash block. Each command runs in a new subshell: `cd` and exported \
variables do not persist, so prefix commands with `cd dir &&` where needed.
2. Inspect files with cat, grep or `nl -ba file | sed -n '10,20p'`; edit them with sed -i, or with \
`cat <<'EOF' > file`; run Python with `python`.
3. There is no network access. Do not edit the tests: hidden tests decide whether the bug is fixed.
4. When the fix is done, submit with `echo {{sentinel}}` alone; you cannot continue after that."""

FORMAT_ERROR_TEMPLATE = """\
{% if finish_reason == "length" -%}
Your reply hit the output length limit before it contained a complete action. Reply more concisely, \
with exactly one ```bash block.
{%- else -%}
Format error: expected exactly one ```bash block, found {{actions|length}}.

Reply with a short THOUGHT and exactly one action:

```bash
<command>
```

When you are done, submit with `echo {{sentinel}}`.
{%- endif %}"""

OBSERVATION_TEMPLATE = """\
{% if exception_info -%}
<exception>{{exception_info}}</exception>
{% endif -%}
<returncode>{{returncode}}</returncode>
{% if output | length <= max_chars -%}
<output>
{{ output -}}
</output>
{%- else -%}
<warning>
The output was too long; showing its first and last {{ max_chars // 2 }} characters. Use head, tail, \
grep or sed -n to see less at a time.
</warning>
<output_head>
{{ output[:max_chars // 2] }}
</output_head>
<elided_chars>
{{ output | length - (max_chars // 2) * 2 }} characters elided
</elided_chars>
<output_tail>
{{ output[-(max_chars // 2):] }}
</output_tail>
{%- endif %}"""


@dataclass(frozen=True)
class Prompts:
    system: str = SYSTEM_TEMPLATE
    instance: str = INSTANCE_TEMPLATE
    format_error: str = FORMAT_ERROR_TEMPLATE
    observation: str = OBSERVATION_TEMPLATE

    @classmethod
    def load(cls, prompt_file: str = "") -> "Prompts":
        """Built-in templates, overridden by the keys of a TOML prompt file when given."""
        if not prompt_file:
            return cls()
        data = tomllib.loads(Path(prompt_file).read_text())
        keys = {"system_template": "system", "instance_template": "instance",
                "format_error_template": "format_error", "observation_template": "observation"}
        unknown = set(data) - set(keys)
        if unknown:
            raise ValueError(f"environment.args.agent.prompt_file {prompt_file}: unknown keys {sorted(unknown)} "
                             f"(allowed: {sorted(keys)})")
        return cls(**{keys[k]: v for k, v in data.items()})


def render(template: str, **variables) -> str:
    return Template(template, undefined=StrictUndefined, keep_trailing_newline=False).render(**variables)
