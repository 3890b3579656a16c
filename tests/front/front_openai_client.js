// front_openai_client.js: the official `openai` npm client, unmodified, streams a bridged chat
// completion through the front: the X-PD-Bridge header says complete, the final chunk carries the
// pd_bridge object, and the streamed text equals the native decoder's answer to the same chat;
// then a second bridged prompt with logprobs (top 20) whose vectors equal the native decoder's,
// stream and not, n = 2 (with a forced call too) and JSON mode through the front; the front refuses
// what the decoder would (an unknown field, a refused one, JSON mode with tools, a message's name).
// Usage: OPENAI_MODULE=... node front_openai_client.js FRONT_URL NATIVE_URL
'use strict';
const OpenAI = require(process.env.OPENAI_MODULE || 'openai');
const [front, native] = process.argv.slice(2);
const mk = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'dummy', maxRetries: 0, timeout: 300000 });

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function main() {
  let text = '';
  for (let i = 0; i < 70; i++) text += `Paragraph ${i}: the bridge computes the decoder's finished cache on the prefill engine. `;
  const models = [];
  for await (const m of mk(front).models.list()) models.push(m.id);
  const req = { model: models[0], messages: [{ role: 'user', content: text + '\nSummarise the text.' }], max_tokens: 12, temperature: 0 };
  const { data: stream, response } = await mk(front).chat.completions.create({ ...req, stream: true }).withResponse();
  const verdict = response.headers.get('x-pd-bridge') || '';
  let got = '', last = null;
  for await (const ch of stream) {
    if (ch.choices.length && ch.choices[0].delta && ch.choices[0].delta.content) got += ch.choices[0].delta.content;
    last = ch;
  }
  check(verdict.startsWith('complete'), `X-PD-Bridge header: ${verdict}`);
  check(last && last.pd_bridge && last.pd_bridge.kind === 'complete', `final chunk pd_bridge: ${JSON.stringify(last)}`);
  const ref = await mk(native).chat.completions.create(req);
  check(got === ref.choices[0].message.content, `bridged ${JSON.stringify(got)} != native ${JSON.stringify(ref.choices[0].message.content)}`);
  // logprobs through the front on a second cold prompt (bridged): the top-20 vectors equal the
  // native decoder's, token by token and number by number (the decoder's logits are the same
  // bits whoever wrote the cache)
  let text2 = '';
  for (let i = 0; i < 70; i++) text2 += `Section ${i}: a prefix cache is content addressed, so blocks written by others are found. `;
  const lpReq = { model: models[0], messages: [{ role: 'user', content: text2 + '\nWhat is it about?' }], max_tokens: 8,
                  temperature: 0, logprobs: true, top_logprobs: 20, ignore_eos: true };
  const { data: br, response: r2 } = await mk(front).chat.completions.create(lpReq).withResponse();
  const v2 = r2.headers.get('x-pd-bridge') || '';
  check(v2.startsWith('complete'), `logprobs request bridged: ${v2}`);
  const nat = await mk(native).chat.completions.create(lpReq);
  const vec = (r) => r.choices[0].logprobs.content.map((e) => [e.token, e.logprob, e.top_logprobs.map((t) => [t.token, t.logprob])]);
  const bv = vec(br), nv = vec(nat);
  check(bv.length === 8 && bv.every((e) => e[2].length === 20), 'bridged: 8 positions of 20 alternatives');
  check(JSON.stringify(bv) === JSON.stringify(nv), 'bridged top-20 logprob vectors identical to native');
  const sv = [];
  for await (const ch of await mk(front).chat.completions.create({ ...lpReq, stream: true }))
    for (const c of ch.choices) if (c.logprobs && c.logprobs.content) sv.push(...c.logprobs.content);
  check(JSON.stringify(sv.map((e) => [e.token, e.logprob, e.top_logprobs.map((t) => [t.token, t.logprob])])) === JSON.stringify(nv),
        'streamed through the front: the same vectors');
  // n = 2 and JSON mode through the front
  const two = await mk(front).chat.completions.create({ ...req, max_tokens: 6, temperature: 1, seed: 3, n: 2 });
  check(two.choices.length === 2, 'n = 2 through the front');
  // n = 2 with a forced call: each choice makes the call, its arguments one JSON object
  const twoCalls = await mk(front).chat.completions.create({ ...req, max_tokens: 12, temperature: 1, seed: 3, n: 2,
    tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'f' } } });
  check(twoCalls.choices.length === 2 && twoCalls.choices.every((c) => c.finish_reason === 'tool_calls' && c.message.tool_calls.length === 1
        && c.message.tool_calls[0].function.name === 'f' && typeof JSON.parse(c.message.tool_calls[0].function.arguments) === 'object'),
        `n = 2 with a forced call through the front: ${JSON.stringify(twoCalls.choices.map((c) => c.message))}`);
  for (let seed = 1; seed <= 3; seed++) {
    const j = await mk(front).chat.completions.create({ ...req, max_tokens: 20, temperature: 1, seed, response_format: { type: 'json_object' } });
    let ok = false;
    try { const o = JSON.parse(j.choices[0].message.content); ok = o !== null && typeof o === 'object' && !Array.isArray(o); } catch (e) { ok = false; }
    check(ok, `JSON mode through the front, seed ${seed}: ${JSON.stringify(j.choices[0].message.content)}`);
  }
  // the front refuses what the decoder would, before any bridge: an unknown field, a refused one
  for (const [field, extra] of [['frobnicate', { frobnicate: 1 }], ['functions', { functions: [{ name: 'f' }] }],
                               ['response_format', { response_format: { type: 'json_object' }, tools: [{ type: 'function', function: { name: 'f' } }] }],
                               ['messages[0].name', { messages: [{ role: 'user', content: 'x', name: 'ann' }] }]]) {
    let status = 0, param = null;
    try { await mk(front).chat.completions.create({ ...req, ...extra }); } catch (e) { status = e.status; param = e.param; }
    check(status === 400 && param === field, `front: ${field} refused with 400 naming it (got ${status} ${param})`);
  }
  console.log(`front-openai-client: ok (${verdict.split(';')[0]}, ${got.length} chars equal to native; bridged top-20 logprobs `
              + `of ${bv.length} positions identical to native, stream too; n = 2; JSON mode 3 seeds parse)`);
}
main().catch((e) => { console.error(`front-openai-client: FAIL ${e.message}`); process.exit(1); });
