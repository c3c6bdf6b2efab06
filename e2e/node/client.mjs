// Drives an OpenAI-compatible server with the official `openai` npm client
// and prints a JSON summary of what the client parsed, for loopguard's Go
// e2e tests.
//
// Usage: node client.mjs BASE_URL SCENARIO
//   BASE_URL  e.g. http://127.0.0.1:8787/v1 (or env OPENAI_BASE_URL)
//   SCENARIO  stream | stream-usage | nonstream | all (or env SCENARIO)
//
// Output (stdout, one JSON object): {"calls":[{"scenario","content",
// "reasoning","tool_calls":[{"index","id","name","arguments"}],
// "finish_reason","usage","chunks","error"}]}. Errors are reported in the
// summary, never thrown, so the Go side always gets JSON; exit code 0.
import OpenAI from 'openai';

const baseURL = process.argv[2] || process.env.OPENAI_BASE_URL;
const scenario = process.argv[3] || process.env.SCENARIO || 'all';
if (!baseURL) {
  process.stderr.write('usage: node client.mjs BASE_URL SCENARIO\n');
  process.exit(2);
}

const client = new OpenAI({
  baseURL,
  apiKey: process.env.OPENAI_API_KEY || 'sk-e2e',
  // The tests assert on exactly one upstream request per call.
  maxRetries: 0,
  timeout: 15000,
});

const request = {
  model: 'fake-model',
  messages: [
    { role: 'system', content: 'You are a coding agent.' },
    { role: 'user', content: 'Read src/main.go and run the tests.' },
  ],
  tools: [
    {
      type: 'function',
      function: {
        name: 'read_file',
        description: 'Read a file',
        parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
      },
    },
    {
      type: 'function',
      function: {
        name: 'bash',
        description: 'Run a command',
        parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
      },
    },
  ],
};

function describeError(err) {
  return { name: err?.constructor?.name || 'Error', status: err?.status ?? null, message: String(err?.message ?? err) };
}

async function streamCall(includeUsage) {
  const out = { scenario: includeUsage ? 'stream-usage' : 'stream', content: '', reasoning: '', tool_calls: [], finish_reason: null, usage: null, chunks: 0, error: null };
  const calls = new Map();
  try {
    const params = { ...request, stream: true };
    if (includeUsage) params.stream_options = { include_usage: true };
    const stream = await client.chat.completions.create(params);
    for await (const chunk of stream) {
      out.chunks++;
      if (chunk.usage) out.usage = chunk.usage;
      for (const choice of chunk.choices ?? []) {
        const d = choice.delta ?? {};
        if (typeof d.content === 'string') out.content += d.content;
        if (typeof d.reasoning_content === 'string') out.reasoning += d.reasoning_content;
        if (typeof d.reasoning === 'string') out.reasoning += d.reasoning;
        for (const tc of d.tool_calls ?? []) {
          const c = calls.get(tc.index) ?? { index: tc.index, id: '', name: '', arguments: '' };
          if (tc.id) c.id = tc.id;
          if (tc.function?.name) c.name = tc.function.name;
          if (typeof tc.function?.arguments === 'string') c.arguments += tc.function.arguments;
          calls.set(tc.index, c);
        }
        if (choice.finish_reason) out.finish_reason = choice.finish_reason;
      }
    }
  } catch (err) {
    out.error = describeError(err);
  }
  out.tool_calls = [...calls.values()].sort((a, b) => a.index - b.index);
  return out;
}

async function plainCall() {
  const out = { scenario: 'nonstream', content: '', reasoning: '', tool_calls: [], finish_reason: null, usage: null, chunks: 0, error: null };
  try {
    const resp = await client.chat.completions.create({ ...request, stream: false });
    const choice = resp.choices[0];
    out.content = choice.message.content ?? '';
    out.reasoning = choice.message.reasoning_content ?? choice.message.reasoning ?? '';
    out.tool_calls = (choice.message.tool_calls ?? []).map((tc, index) => ({
      index, id: tc.id, name: tc.function.name, arguments: tc.function.arguments,
    }));
    out.finish_reason = choice.finish_reason;
    out.usage = resp.usage ?? null;
  } catch (err) {
    out.error = describeError(err);
  }
  return out;
}

const plan = {
  stream: [() => streamCall(false)],
  'stream-usage': [() => streamCall(true)],
  nonstream: [plainCall],
  all: [() => streamCall(false), () => streamCall(true), plainCall],
}[scenario];
if (!plan) {
  process.stderr.write(`unknown scenario ${scenario}\n`);
  process.exit(2);
}
const results = [];
for (const step of plan) results.push(await step());
process.stdout.write(JSON.stringify({ calls: results }) + '\n');
