// front_tools_client.js: the official `openai` npm client, unmodified, makes a forced tool-call
// round trip through the front on a prompt long enough to be bridged: tool_choice naming a
// function -> choices[0].message.tool_calls (id, type, function.name, function.arguments) with
// finish_reason "tool_calls" -> the same call streamed as tool_call deltas (assembled equal to the
// non-stream call) -> the assistant message and a role "tool" message sent back -> an answer
// with content, equal to the native decoder's answer to the same conversation; then tool_choice
// "required" among the two tools (the name masked to one of them) through the front, equal to
// the native decoder's call, its arguments one JSON object.
// Usage: OPENAI_MODULE=... node front_tools_client.js FRONT_URL NATIVE_URL
'use strict';
const OpenAI = require(process.env.OPENAI_MODULE || 'openai');
const [front, native] = process.argv.slice(2);
const mk = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'dummy', maxRetries: 0, timeout: 300000 });

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
];

async function main() {
  let text = '';
  for (let i = 0; i < 70; i++) text += `Report ${i}: the bridge computes the decoder's finished cache for the weather service. `;
  const models = [];
  for await (const m of mk(front).models.list()) models.push(m.id);
  const user = { role: 'user', content: text + '\nWhat is the weather in Paris?' };
  // max_tokens above the server's 256-token bound on a forced call: the mask closes the arguments'
  // object within it (random weights never would), so the finish is "tool_calls"
  const req = { model: models[0], messages: [user], tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
                max_tokens: 300, temperature: 0 };

  const { data: first, response } = await mk(front).chat.completions.create(req).withResponse();
  const verdict = response.headers.get('x-pd-bridge') || '';
  check(verdict.startsWith('complete'), `first request bridged: X-PD-Bridge ${verdict}`);
  check(first.pd_bridge && first.pd_bridge.kind === 'complete', `pd_bridge in the body: ${JSON.stringify(first.pd_bridge)}`);
  const ch = first.choices[0];
  check(ch.finish_reason === 'tool_calls', `finish_reason ${ch.finish_reason}`);
  check(ch.message.content === null, `content null beside tool calls: ${JSON.stringify(ch.message.content)}`);
  const calls = ch.message.tool_calls || [];
  check(calls.length === 1, `one tool call: ${JSON.stringify(calls)}`);
  const call = calls[0];
  check(typeof call.id === 'string' && call.id.startsWith('call_'), `call id ${call.id}`);
  check(call.type === 'function' && call.function.name === 'get_weather', `forced function: ${JSON.stringify(call)}`);
  check(typeof call.function.arguments === 'string' && call.function.arguments.length > 0, 'arguments text');
  let parsed = null;
  try { parsed = JSON.parse(call.function.arguments); } catch (e) { parsed = null; }
  check(parsed && typeof parsed === 'object' && !Array.isArray(parsed), `the arguments parse as one JSON object: ${call.function.arguments}`);
  check(first.usage.prompt_tokens_details.cached_tokens > 0, `cached_tokens ${JSON.stringify(first.usage)}`);

  // the same call streamed (now warm: the verdict says so); deltas assemble to the same call
  const stream = await mk(front).chat.completions.create({ ...req, stream: true });
  let sName = '', sArgs = '', sId = '', sFinish = null, last = null;
  for await (const c of stream) {
    last = c;
    if (!c.choices.length) continue;
    const d = c.choices[0].delta || {};
    for (const tc of d.tool_calls || []) {
      check(tc.index === 0, `delta index ${tc.index}`);
      if (tc.id) sId = tc.id;
      if (tc.function && tc.function.name) sName += tc.function.name;
      if (tc.function && tc.function.arguments) sArgs += tc.function.arguments;
    }
    if (c.choices[0].finish_reason) sFinish = c.choices[0].finish_reason;
  }
  check(sName === 'get_weather' && sId.startsWith('call_'), `streamed call head: ${sId} ${sName}`);
  check(sArgs === call.function.arguments, `streamed arguments equal the non-stream ones (${sArgs.length} vs ${call.function.arguments.length} chars)`);
  check(sFinish === 'tool_calls', `streamed finish_reason ${sFinish}`);
  check(last && last.pd_bridge, 'pd_bridge in the final chunk');

  // the round trip: the assistant's call and the tool's result go back; the model answers
  const convo = [user, ch.message, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 18, "sky": "clear"}' }];
  const req2 = { model: models[0], messages: convo, tools, tool_choice: 'auto', max_tokens: 12, temperature: 0 };
  const { data: answer, response: r2 } = await mk(front).chat.completions.create(req2).withResponse();
  const v2 = r2.headers.get('x-pd-bridge') || '';
  check(v2.length > 0, 'X-PD-Bridge on the answer');
  const a = answer.choices[0];
  check(typeof a.message.content === 'string' && a.message.content.length > 0, `answer content ${JSON.stringify(a.message)}`);
  check(a.finish_reason === 'length' || a.finish_reason === 'stop' || a.finish_reason === 'tool_calls', `answer finish ${a.finish_reason}`);
  const ref = await mk(native).chat.completions.create(req2);
  check(JSON.stringify(ref.choices[0].message) === JSON.stringify(a.message),
        `answer through the front ${JSON.stringify(a.message)} != native ${JSON.stringify(ref.choices[0].message)}`);
  // tool_choice "required" among the 2 tools: the model chooses the name under the mask; through
  // the front (bridged: the prompt ends at the call's separator) it is the native decoder's call
  const req3 = { ...req, tool_choice: 'required', max_tokens: 60 };
  const { data: any, response: r3 } = await mk(front).chat.completions.create(req3).withResponse();
  const c3 = any.choices[0];
  check((r3.headers.get('x-pd-bridge') || '').length > 0, 'X-PD-Bridge on the required call');
  check(c3.finish_reason === 'tool_calls' && (c3.message.tool_calls || []).length === 1 &&
        ['get_weather', 'get_time'].includes(c3.message.tool_calls[0].function.name), `required among 2 tools: ${JSON.stringify(c3.message)}`);
  let p3 = null;
  try { p3 = JSON.parse(c3.message.tool_calls[0].function.arguments); } catch (e) { p3 = null; }
  check(p3 && typeof p3 === 'object' && !Array.isArray(p3), `required call's arguments parse: ${c3.message.tool_calls[0].function.arguments}`);
  const ref3 = await mk(native).chat.completions.create(req3);
  check(JSON.stringify(ref3.choices[0].message.tool_calls.map((t) => t.function)) === JSON.stringify(c3.message.tool_calls.map((t) => t.function)),
        `required call through the front == native: ${JSON.stringify(ref3.choices[0].message)}`);
  console.log(`front-tools-client: ok (call ${call.id} get_weather, ${call.function.arguments.length} chars of arguments, ` +
              `streamed equal; answer ${v2.split(';')[0]}, equal to native)`);
}
main().catch((e) => { console.error(`front-tools-client: FAIL ${e.message}`); process.exit(1); });
