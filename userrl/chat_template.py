"""Chat-template preambles: a model's own template, taught to render OpenAI `tools` and assistant `tool_calls`
the way an action protocol rendered them in training (docs/spec/ALGORITHMS.md §1.2).

`userrl export` writes the result into the exported tokenizer and the Serve gateway applies it to the model it
serves, so transformers' `apply_chat_template`, vLLM's OpenAI server and `userrl serve` all turn the same
OpenAI conversation into the token ids the policy was trained on. A preamble only rewrites `messages` (and
reads `tools`) before the model's template runs:

Which preamble a protocol gets is the protocol's (`ActionProtocol.preamble_kind`):
- `tool_call` (also used for `bracket`, which never passes `tools`): the tool instructions of
  userrl.protocols.tool_call.TOOL_INSTRUCTIONS are appended to the system message.
- `native_tools`: when the model's template ignores `tools` (SmolLM2's), the schemas are written into the
  system message as userrl.protocols.native_tools.NATIVE_TOOL_INSTRUCTIONS (text generated from that one
  constant); when it renders `tools` itself (`native_tools_template`), they are left to it, as training left them.
- both: an assistant message's `tool_calls` become `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`
  text after its content, the form `ChatFormat.render_action` writes; arguments given as an object (vLLM
  parses the JSON string into one, and so does the gateway) are written with `json.dumps` defaults, as
  training wrote them.
"""

from __future__ import annotations

import json

from userrl.protocols import get_protocol
from userrl.protocols.native_tools import NATIVE_TOOL_INSTRUCTIONS

# The tool_call protocol's instructions (userrl.protocols.tool_call.TOOL_INSTRUCTIONS for one tool), or a plainer list for
# several tools, which training never offered.
_TOOL_CALL_SYSTEM = r"""{%- if tools | length == 1 -%}
    {%- set fn = tools[0].function if tools[0].function is defined else tools[0] -%}
    {%- for key in (fn.parameters.properties if fn.parameters is defined and fn.parameters.properties is defined else {}) -%}
      {%- set ns.example = ns.example + ('' if loop.first else ', ') + '"' + key + '": "..."' -%}
    {%- endfor -%}
    {%- set ns.text = 'You have one tool:\n' + (fn | tojson) + '\nCall it by writing\n<tool_call>\n{"name": "' + fn.name + '", "arguments": {' + ns.example + '}}\n</tool_call>' -%}
  {%- else -%}
    {%- set ns.text = 'You have these tools:' -%}
    {%- for tool in tools -%}
      {%- set ns.text = ns.text + '\n' + ((tool.function if tool.function is defined else tool) | tojson) -%}
    {%- endfor -%}
    {%- set ns.text = ns.text + '\nCall one of them by writing\n<tool_call>\n{"name": "<tool name>", "arguments": {<arguments>}}\n</tool_call>' -%}
  {%- endif -%}
"""

# The native_tools instructions: NATIVE_TOOL_INSTRUCTIONS with each schema's "function" object on its own line,
# serialised as training's json.dumps did (ASCII, default separators, keys in the order given).
_NATIVE_SYSTEM = r"""{%- set ns.text = HEAD -%}
    {%- for tool in tools -%}
      {%- set ns.text = ns.text + ('' if loop.first else '\n') + ((tool.function if tool.function is defined else tool) | tojson(ensure_ascii=True)) -%}
    {%- endfor -%}
    {%- set ns.text = ns.text + TAIL -%}
"""

# Appends ns.text to the system message (or makes it the system message), then rewrites assistant tool_calls.
_SYSTEM_AND_CALLS = r"""{%- if tools is defined and tools -%}
  SYSTEM_TEXT
  {%- if messages[0]['role'] == 'system' -%}
    {%- set ns.msgs = [{'role': 'system', 'content': messages[0]['content'].rstrip() + '\n\n' + ns.text}] -%}
  {%- else -%}
    {%- set ns.msgs = [{'role': 'system', 'content': ns.text}, messages[0]] -%}
  {%- endif -%}
  {%- set rest = messages[1:] -%}
{%- else -%}
  {%- set rest = messages -%}
{%- endif -%}
CALLS"""

_CALLS = r"""{%- for m in rest -%}
  {%- if m['role'] == 'assistant' and m.tool_calls is defined and m.tool_calls -%}
    {%- set ns.text = m['content'] if m['content'] else '' -%}
    {%- for call in m.tool_calls -%}
      {%- set f = call.function if call.function is defined else call -%}
      {%- set args = f.arguments if f.arguments is string else (f.arguments | tojson(ensure_ascii=True)) -%}
      {%- set ns.text = ns.text + ('\n' if ns.text else '') + '<tool_call>\n{"name": ' + (f.name | tojson(ensure_ascii=True)) + ', "arguments": ' + args + '}\n</tool_call>' -%}
    {%- endfor -%}
    {%- set ns.msgs = ns.msgs + [{'role': 'assistant', 'content': ns.text}] -%}
  {%- else -%}
    {%- set ns.msgs = ns.msgs + [{'role': m['role'], 'content': m['content'] if m['content'] else ''}] -%}
  {%- endif -%}
{%- endfor -%}
{%- set messages = ns.msgs -%}
"""

_NAMESPACE = "{%- set ns = namespace(msgs=[], text='', example='') -%}\n"

#: The first line of a template carrying a preamble, per kind (the tool_call one predates the others).
MARKERS = {"tool_call": "{#- userrl tools preamble -#}", "native_tools": "{#- userrl native_tools preamble -#}",
           "native_tools_template": "{#- userrl native_tools preamble (template renders tools) -#}"}


def _jinja_string(text: str) -> str:
    """`text` as a Jinja string literal (JSON escapes are Jinja escapes)."""
    return json.dumps(text)


def _native_system() -> str:
    head, tail = NATIVE_TOOL_INSTRUCTIONS.format(schemas="\0").split("\0")
    return _NATIVE_SYSTEM.replace("HEAD", _jinja_string(head)).replace("TAIL", _jinja_string(tail))


def _preamble(kind: str) -> str:
    if kind == "native_tools_template":  # the model's template renders `tools`: only the calls are rewritten
        return _NAMESPACE + "{%- set rest = messages -%}\n" + _CALLS
    system = _native_system() if kind == "native_tools" else _TOOL_CALL_SYSTEM
    return _NAMESPACE + _SYSTEM_AND_CALLS.replace("SYSTEM_TEXT", system.strip()).replace("CALLS", _CALLS)


def _split(template: str) -> tuple[str | None, str | None]:
    """(the preamble kind the template carries or None, the model's own template or None when that preamble
    is not this version's)."""
    for kind, marker in MARKERS.items():
        if template.startswith(marker):
            head = marker + _preamble(kind)
            return kind, (template[len(head):] if template.startswith(head) else None)
    return None, template


def tool_chat_template(template: str | None, protocol: str = "tool_call") -> str:
    """The model's chat template with the preamble for `protocol` in front.

    Idempotent (a template that carries this protocol's preamble, of any userrl version, is kept as it is),
    and a template that carries another protocol's preamble gets this one instead (a model exported as
    `tool_call` served with `protocol: native_tools`).
    """
    if not template:
        raise ValueError("this tokenizer has no chat template; userrl renders conversations with the model's own "
                         "template (an instruct / chat model)")
    action_protocol = get_protocol(protocol)
    carried, base = _split(template)
    if carried in action_protocol.preamble_kinds:
        return template
    if base is None:
        raise ValueError(f"this chat template carries a userrl preamble ({MARKERS[carried]}) of another userrl "
                         f"version, for another protocol than {protocol!r}; export the checkpoint again")
    kind = action_protocol.preamble_kind(base)
    return MARKERS[kind] + _preamble(kind) + base
