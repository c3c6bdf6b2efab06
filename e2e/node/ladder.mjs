// A looping agent driven by the official `openai` npm client, for
// loopguard's Go e2e ladder tests: it keeps calling `bash` with
// {"command":"make build"}, gets the same failing result every time and sends
// its growing history each turn, until the model stops calling tools, the
// client throws, or MAX_TURNS is reached.
//
// Usage: node ladder.mjs BASE_URL MODE SESSION [MAX_RETRIES] [MAX_TURNS]
//   BASE_URL     e.g. http://127.0.0.1:8787/v1
//   MODE         stream | nonstream
//   SESSION      sent as X-Session-ID on every request
//   MAX_RETRIES  the client's maxRetries (default 0)
//   MAX_TURNS    upper bound on turns (default 10)
//
// Output (stdout, one JSON object): {"turns":[{"body","action","loop",
// "session","status","content","finish_reason","tool_calls","usage",
// "error"}],"fetches":N}. "body" is the exact request body the client
// handed to fetch (recorded through the client's `fetch` option), so the Go
// side can compare it byte for byte with what the upstream received;
// "fetches" counts every HTTP request the client made, retries included.
// Errors are reported, never thrown, so the Go side always gets JSON.
import OpenAI from 'openai';

const [baseURL, mode, session, maxRetriesArg, maxTurnsArg] = process.argv.slice(2);
if (!baseURL || !mode || !session) {
  process.stderr.write('usage: node ladder.mjs BASE_URL MODE SESSION [MAX_RETRIES] [MAX_TURNS]\n');
  process.exit(2);
}
const stream = mode === 'stream';
const maxTurns = Number(maxTurnsArg || 10);

const bodies = [];
let fetches = 0;
const client = new OpenAI({
  baseURL,
  apiKey: 'sk-e2e',
  maxRetries: Number(maxRetriesArg || 0),
  timeout: 15000,
  defaultHeaders: { 'X-Session-ID': session },
  // Records the bytes the client really sends, retries included.
  fetch: async (url, init) => {
    fetches++;
    bodies.push(typeof init?.body === 'string' ? init.body : '');
    return fetch(url, init);
  },
});

const tools = [{
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
}];
const failing = "make: *** No rule to make target 'build'.  Stop.\nexit code 2";
const messages = [
  { role: 'system', content: 'You are a coding agent. Use the bash tool.' },
  { role: 'user', content: 'Build the project and fix any error.' },
];

function describeError(err) {
  const h = err?.headers;
  const get = (k) => (h && typeof h.get === 'function' ? h.get(k) : null);
  return {
    name: err?.constructor?.name || 'Error',
    api_error: err instanceof OpenAI.APIError,
    status: err?.status ?? null,
    type: err?.type ?? null,
    code: err?.code ?? null,
    should_retry: get('x-should-retry'),
    action: get('x-loopguard-action'),
    message: String(err?.message ?? err),
  };
}

async function turn() {
  const out = { body: '', action: null, loop: null, session: null, status: null, content: '', finish_reason: null, tool_calls: [], usage: null, error: null };
  const before = bodies.length;
  try {
    const params = { model: 'fake-model', messages, tools, stream };
    if (stream) params.stream_options = { include_usage: true };
    const { data, response } = await client.chat.completions.create(params).withResponse();
    out.status = response.status;
    out.action = response.headers.get('x-loopguard-action');
    out.loop = response.headers.get('x-loopguard-loop');
    out.session = response.headers.get('x-loopguard-session');
    if (stream) {
      const calls = new Map();
      for await (const chunk of data) {
        if (chunk.usage) out.usage = chunk.usage;
        for (const choice of chunk.choices ?? []) {
          const d = choice.delta ?? {};
          if (typeof d.content === 'string') out.content += d.content;
          for (const tc of d.tool_calls ?? []) {
            const c = calls.get(tc.index) ?? { id: '', name: '', arguments: '' };
            if (tc.id) c.id = tc.id;
            if (tc.function?.name) c.name = tc.function.name;
            if (typeof tc.function?.arguments === 'string') c.arguments += tc.function.arguments;
            calls.set(tc.index, c);
          }
          if (choice.finish_reason) out.finish_reason = choice.finish_reason;
        }
      }
      out.tool_calls = [...calls.entries()].sort((a, b) => a[0] - b[0]).map((e) => e[1]);
    } else {
      const choice = data.choices[0];
      out.content = choice.message.content ?? '';
      out.finish_reason = choice.finish_reason;
      out.usage = data.usage ?? null;
      out.tool_calls = (choice.message.tool_calls ?? []).map((tc) => ({ id: tc.id, name: tc.function.name, arguments: tc.function.arguments }));
    }
  } catch (err) {
    out.error = describeError(err);
  }
  out.body = bodies[before] ?? '';
  return out;
}

const turns = [];
for (let i = 0; i < maxTurns; i++) {
  const t = await turn();
  turns.push(t);
  if (t.error || t.tool_calls.length === 0) break;
  messages.push({
    role: 'assistant',
    content: t.content || null,
    tool_calls: t.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
  });
  for (const c of t.tool_calls) messages.push({ role: 'tool', tool_call_id: c.id, content: failing });
}
process.stdout.write(JSON.stringify({ turns, fetches }) + '\n');
