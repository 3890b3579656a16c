// openai_client.js: drives a pdbridge server with the official `openai` npm client, unmodified:
// models.list, completions and chat completions, stream and not; the streamed text must equal the
// non-stream text (greedy); in text mode also logprobs, n = 2 and JSON mode. Usage: OPENAI_MODULE=/path/to/node_modules/openai node openai_client.js
// PORT TEXT_MODE(1|0). Prints "openai-client: ok ..." and exits 0, or prints the failure and exits 1.
'use strict';
const OpenAI = require(process.env.OPENAI_MODULE || 'openai');
const port = process.argv[2];
const textMode = process.argv[3] === '1';
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'dummy', maxRetries: 0, timeout: 120000 });

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function main() {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  check(ids.length === 1, `one model listed, got ${JSON.stringify(ids)}`);
  const model = ids[0];
  const prompt = textMode ? 'The quick brown fox' : [11, 22, 33, 44, 55, 66];
  const common = { model, prompt, max_tokens: 12, temperature: 0 };

  const c = await client.completions.create(common);
  check(c.object === 'text_completion', 'completion object');
  check(c.choices.length === 1 && ['length', 'stop'].includes(c.choices[0].finish_reason), 'completion finish_reason');
  check(c.usage && c.usage.completion_tokens > 0, 'completion usage');
  let streamed = '', finish = null, chunks = 0;
  for await (const ch of await client.completions.create({ ...common, stream: true })) {
    chunks++;
    if (ch.choices.length) {
      streamed += ch.choices[0].text || '';
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
  }
  check(streamed === c.choices[0].text, `streamed completion text ${JSON.stringify(streamed)} == ${JSON.stringify(c.choices[0].text)}`);
  check(finish === c.choices[0].finish_reason, 'streamed completion finish_reason');
  let summary = `completions ok (${chunks} chunks)`;

  if (textMode) {
    const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Name a colour.' }];
    const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
    check(r.object === 'chat.completion', 'chat object');
    const msg = r.choices[0].message;
    check(msg.role === 'assistant' && typeof msg.content === 'string', 'chat message');
    let text = '', usage = null, role = null, fin = null;
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      if (!ch.choices.length) continue;
      const d = ch.choices[0].delta || {};
      if (d.role) role = d.role;
      if (d.content) text += d.content;
      if (ch.choices[0].finish_reason) fin = ch.choices[0].finish_reason;
    }
    check(role === 'assistant', 'stream role');
    check(text === msg.content, `streamed chat ${JSON.stringify(text)} == ${JSON.stringify(msg.content)}`);
    check(fin === r.choices[0].finish_reason, 'stream chat finish_reason');
    check(usage && usage.prompt_tokens === r.usage.prompt_tokens && usage.completion_tokens === r.usage.completion_tokens,
          'stream usage equals non-stream usage');
    summary += ', chat ok (stream + non-stream)';

    // logprobs: top-20 alternatives, the greedy token is the top-1; the stream carries the same numbers
    const lpReq = { model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 20 };
    const lr = await client.chat.completions.create(lpReq);
    const content = lr.choices[0].logprobs.content;
    check(content.length === lr.usage.completion_tokens, `one logprob entry per token (${content.length})`);
    check(content.every((e) => e.top_logprobs.length === 20 && e.top_logprobs[0].logprob === e.logprob && e.logprob <= 0),
          'top-20 per position, the greedy token first');
    const streamed = [];
    for await (const ch of await client.chat.completions.create({ ...lpReq, stream: true }))
      for (const c of ch.choices) if (c.logprobs && c.logprobs.content) streamed.push(...c.logprobs.content);
    check(JSON.stringify(streamed) === JSON.stringify(content), 'streamed logprobs equal the non-stream ones');
    // n = 2: two choices, each its own sampling stream
    const two = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 5, n: 2 });
    check(two.choices.length === 2 && two.choices.map((c) => c.index).sort().join() === '0,1', 'n = 2 gives choices 0 and 1');
    // JSON mode: every answer parses, whatever the seed (random weights)
    for (let seed = 1; seed <= 4; seed++) {
      const j = await client.chat.completions.create({
        model, messages, max_tokens: 24, temperature: 1, seed, response_format: { type: 'json_object' },
      });
      const text = j.choices[0].message.content;
      let obj = null;
      try { obj = JSON.parse(text); } catch (e) { /* checked below */ }
      check(obj !== null && typeof obj === 'object' && !Array.isArray(obj), `JSON mode seed ${seed}: ${JSON.stringify(text)} parses as an object`);
    }
    summary += ', logprobs (top 20, stream == non-stream), n = 2, JSON mode (4 seeds parse)';
  }
  // an error surfaces as the client's typed error with the server's status
  try {
    await client.completions.create({ ...common, max_tokens: -1 });
    check(false, 'max_tokens -1 must fail');
  } catch (e) {
    check(e.status === 400, `max_tokens -1 -> 400 (got ${e.status} ${e.message})`);
  }
  console.log(`openai-client: ok: ${summary}, errors ok`);
}

main().catch((e) => {
  console.error(`openai-client: FAIL: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
