// Runs an agent's turns with the official `openai` npm client for the Go
// soak test: reads a JSON array of {turn, stream, messages} on stdin and
// prints a JSON array of {turn, content, error}. Errors are reported, never
// thrown; exit code 0.
//
// Usage: node soak.mjs BASE_URL < plan.json
import OpenAI from 'openai';

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: 'sk-soak', maxRetries: 0, timeout: 15000 });

let input = '';
for await (const chunk of process.stdin) input += chunk;
const plan = JSON.parse(input);

const results = [];
for (const { turn, stream, messages } of plan) {
  const r = { turn, content: '', error: '' };
  try {
    if (stream) {
      const s = await client.chat.completions.create({ model: 'soak', messages, stream: true });
      for await (const chunk of s) r.content += chunk.choices[0]?.delta?.content ?? '';
    } else {
      const c = await client.chat.completions.create({ model: 'soak', messages });
      r.content = c.choices[0].message.content;
    }
  } catch (err) {
    r.error = String(err?.message ?? err);
  }
  results.push(r);
}
process.stdout.write(JSON.stringify(results));
