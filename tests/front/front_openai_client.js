// front_openai_client.js: the official `openai` npm client, unmodified, streams a bridged chat
// completion through the front: the X-PD-Bridge header says complete, the final chunk carries the
// pd_bridge object, and the streamed text equals the native decoder's answer to the same chat.
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
  console.log(`front-openai-client: ok (${verdict.split(';')[0]}, ${got.length} chars equal to native)`);
}
main().catch((e) => { console.error(`front-openai-client: FAIL ${e.message}`); process.exit(1); });
