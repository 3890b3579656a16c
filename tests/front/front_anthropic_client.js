// front_anthropic_client.js: the official Anthropic SDK (@anthropic-ai/sdk), unmodified, drives
// /v1/messages through the front on prompts long enough to be bridged: a non-stream message and
// a streamed one (each a fresh cold prompt: X-PD-Bridge complete, usage.cache_read_input_tokens
// > 0, pd_bridge in the body / in message_stop, the Messages event sequence in order), both
// answers equal to the native decoder's; then a forced tool_use (non-stream and through the SDK's
// stream helper, whose final message must hold the same tool_use block).
// Usage: ANTHROPIC_MODULE=... node front_anthropic_client.js FRONT_URL NATIVE_URL MODEL
'use strict';
const sdk = require(process.env.ANTHROPIC_MODULE || '@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic || sdk.default || sdk;
const [front, native, model] = process.argv.slice(2);
const mk = (url) => new Anthropic({ baseURL: url, apiKey: 'dummy', maxRetries: 0, timeout: 300000 });

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

function longText(tag) {
  let t = '';
  for (let i = 0; i < 70; i++) t += `${tag} note ${i}: the prefill engine streams the decoder's cache block by block. `;
  return t;
}

const textOf = (msg) => msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

async function main() {
  // 1. non-stream, bridged
  const req = { model, max_tokens: 10, temperature: 0, system: 'You answer briefly.',
                messages: [{ role: 'user', content: [{ type: 'text', text: longText('alpha') + '\nSummarise.' }] }] };
  const { data: msg, response } = await mk(front).messages.create(req).withResponse();
  const verdict = response.headers.get('x-pd-bridge') || '';
  check(verdict.startsWith('complete'), `non-stream bridged: X-PD-Bridge ${verdict}`);
  check(msg.type === 'message' && msg.role === 'assistant' && msg.id.startsWith('msg_'), `message shape ${JSON.stringify(msg).slice(0, 200)}`);
  check(msg.stop_reason === 'max_tokens' || msg.stop_reason === 'end_turn', `stop_reason ${msg.stop_reason}`);
  check(msg.usage.cache_read_input_tokens > 0 && msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0,
        `usage ${JSON.stringify(msg.usage)}`);
  check(msg.pd_bridge && msg.pd_bridge.kind === 'complete', `pd_bridge ${JSON.stringify(msg.pd_bridge)}`);
  const ref = await mk(native).messages.create(req);
  check(textOf(ref) === textOf(msg), `bridged ${JSON.stringify(textOf(msg))} != native ${JSON.stringify(textOf(ref))}`);

  // 2. stream, bridged (another cold prompt): raw events in the Messages order
  const sreq = { ...req, messages: [{ role: 'user', content: longText('beta') + '\nSummarise.' }], stop_sequences: ['\n\n\n'] };
  const { data: stream, response: sr } = await mk(front).messages.create({ ...sreq, stream: true }).withResponse();
  const sv = sr.headers.get('x-pd-bridge') || '';
  check(sv.startsWith('complete'), `stream bridged: X-PD-Bridge ${sv}`);
  const types = [];
  let got = '', startUsage = null, stop = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'message_start') startUsage = ev.message.usage;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') got += ev.delta.text;
    if (ev.type === 'message_stop') stop = ev;
  }
  const seq = types.filter((t, i) => t !== types[i - 1]).join(',');
  check(seq === 'message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop', `event order ${seq}`);
  check(startUsage && startUsage.cache_read_input_tokens > 0, `message_start usage ${JSON.stringify(startUsage)}`);
  check(stop && stop.pd_bridge && stop.pd_bridge.kind === 'complete', `message_stop pd_bridge ${JSON.stringify(stop)}`);
  const sref = await mk(native).messages.create(sreq);
  check(got === textOf(sref), `streamed ${JSON.stringify(got)} != native ${JSON.stringify(textOf(sref))}`);

  // 3. a forced tool_use (warm prompt now), non-stream and through the SDK's stream helper
  const tools = [{ name: 'get_weather', description: 'Current weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const treq = { ...req, max_tokens: 300, tools, tool_choice: { type: 'tool', name: 'get_weather' } };
  const tmsg = await mk(front).messages.create(treq);
  const tu = tmsg.content.find((b) => b.type === 'tool_use');
  check(tu && tu.name === 'get_weather' && tu.id.startsWith('toolu_') && typeof tu.input === 'object', `tool_use ${JSON.stringify(tmsg.content)}`);
  check(tmsg.stop_reason === 'tool_use', `tool stop_reason ${tmsg.stop_reason}`);
  const fin = await mk(front).messages.stream(treq).finalMessage();
  const stu = fin.content.find((b) => b.type === 'tool_use');
  check(stu && stu.name === 'get_weather' && JSON.stringify(stu.input) === JSON.stringify(tu.input), `streamed tool_use ${JSON.stringify(fin.content)}`);
  check(fin.stop_reason === 'tool_use', `streamed tool stop_reason ${fin.stop_reason}`);

  // 4. the tool_result goes back and the model answers
  const rreq = { ...req, tools, messages: [...req.messages, { role: 'assistant', content: tmsg.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: '18 C, clear' }] }] };
  const ans = await mk(front).messages.create(rreq);
  check(textOf(ans).length > 0, `answer after the tool result ${JSON.stringify(ans.content)}`);
  const aref = await mk(native).messages.create(rreq);
  check(textOf(aref) === textOf(ans), 'answer equal to native');
  // 5. a refusal through the front: 400 in the Messages error shape, naming the field
  let refused = null;
  try { await mk(front).messages.create({ ...req, top_a: 1 }); } catch (e) { refused = e; }
  check(refused && refused.status === 400 && refused.error && refused.error.type === 'error' &&
        refused.error.error.type === 'invalid_request_error' && /top_a/.test(refused.error.error.message),
        `unknown field refused: ${refused && refused.status} ${JSON.stringify(refused && refused.error)}`);
  console.log(`front-anthropic-client: ok (non-stream ${verdict.split(';')[0]}, stream ${sv.split(';')[0]}, ` +
              `cache_read_input_tokens ${msg.usage.cache_read_input_tokens}, tool_use round trip)`);
}
main().catch((e) => { console.error(`front-anthropic-client: FAIL ${e.message}`); process.exit(1); });
