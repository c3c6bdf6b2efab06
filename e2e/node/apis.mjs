// A looping agent on the official `openai` npm client's Responses API, for
// loopguard's Go e2e tests: it keeps calling `bash` with
// {"command":"make build"}, gets the same failing function_call_output
// every time and sends its growing input each turn, until the model stops
// calling functions, the client throws, or MAX_TURNS is reached. With
// MAX_TURNS 1 it is one request: the cut tests use it on a degenerate stream.
//
// Usage: node apis.mjs BASE_URL MODE SESSION [MAX_TURNS]
//   BASE_URL   e.g. http://127.0.0.1:8787/v1
//   MODE       stream | nonstream
//   SESSION    sent as X-Session-ID on every request
//   MAX_TURNS  upper bound on turns (default 10)
//
// Output (stdout, one JSON object), the shape of ladder.mjs's:
// {"turns":[{"body","action","loop","session","status","content",
// "finish_reason","tool_calls","usage","error"}],"fetches":N}. "content" is
// the output text (streamed: the output_text deltas, checked against the
// response.completed object), "finish_reason" the response's status,
// "tool_calls" its function_call items as {id: call_id, name, arguments},
// "usage" in chat terms (prompt/completion/total). Errors are reported,
// never thrown, so the Go side always gets JSON.
import OpenAI from 'openai';
import { functionCalls, instructions, messageText, newInput, runTurns, tools } from './responses_agent.mjs';

const [baseURL, mode, session, maxTurnsArg] = process.argv.slice(2);
if (!baseURL || !mode || !session) {
  process.stderr.write('usage: node apis.mjs BASE_URL MODE SESSION [MAX_TURNS]\n');
  process.exit(2);
}
const stream = mode === 'stream';
const maxTurns = Number(maxTurnsArg || 10);

const bodies = [];
let fetches = 0;
const client = new OpenAI({
  baseURL,
  apiKey: 'sk-e2e',
  maxRetries: 0,
  timeout: 15000,
  defaultHeaders: { 'X-Session-ID': session },
  // Records the bytes the client really sends.
  fetch: async (url, init) => {
    fetches++;
    bodies.push(typeof init?.body === 'string' ? init.body : '');
    return fetch(url, init);
  },
});

const input = newInput();

function describeError(err) {
  return {
    name: err?.constructor?.name || 'Error',
    api_error: err instanceof OpenAI.APIError,
    status: err?.status ?? null,
    message: String(err?.message ?? err),
  };
}

async function turn() {
  const out = { body: '', action: null, loop: null, session: null, status: null, content: '', finish_reason: null, tool_calls: [], usage: null, error: null };
  const before = bodies.length;
  try {
    const params = { model: 'fake-model', instructions, input, tools, stream };
    const { data, response } = await client.responses.create(params).withResponse();
    out.status = response.status;
    out.action = response.headers.get('x-loopguard-action');
    out.loop = response.headers.get('x-loopguard-loop');
    out.session = response.headers.get('x-loopguard-session');
    let final = null;
    if (stream) {
      let text = '';
      for await (const ev of data) {
        if (ev.type === 'response.output_text.delta') text += ev.delta;
        if (ev.type === 'response.completed') final = ev.response;
        if (ev.type === 'error') throw new Error(`stream error event: ${ev.message}`);
      }
      if (!final) throw new Error('stream ended without response.completed');
      const done = messageText(final);
      if (done !== text) throw new Error(`streamed text ${JSON.stringify(text)} differs from the completed response's ${JSON.stringify(done)}`);
      out.content = text;
    } else {
      final = data;
      // output_text is the SDK's own convenience over the message items.
      out.content = data.output_text ?? '';
    }
    out.finish_reason = final.status;
    out.tool_calls = functionCalls(final);
    if (final.usage) {
      out.usage = { prompt_tokens: final.usage.input_tokens, completion_tokens: final.usage.output_tokens, total_tokens: final.usage.total_tokens };
    }
  } catch (err) {
    out.error = describeError(err);
  }
  out.body = bodies[before] ?? '';
  return out;
}

const turns = await runTurns(turn, input, maxTurns);
process.stdout.write(JSON.stringify({ turns, fetches }) + '\n');
