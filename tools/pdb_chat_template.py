"""pdb_chat_template: the one jinja2 environment the golden generators render DeepSeek's shipped
chat_template with (gen_tokenizer_golden.py, gen_tools_golden.py), and the BOS/EOS strings it
is given. Invariant: the environment matches what HF transformers uses for chat templates
(sandboxed, trim_blocks, lstrip_blocks, loopcontrols), so a golden is what a reference renders."""

BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def render_chat(template, messages, add_generation_prompt=True):
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    return env.from_string(template).render(messages=messages, bos_token=BOS, eos_token=EOS,
                                            add_generation_prompt=add_generation_prompt)
