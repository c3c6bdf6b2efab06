// A looping agent on the official `openai` npm client's Responses WebSocket
// mode (ResponsesWS, with the `ws` package), for loopguard's Go e2e tests:
// over one socket it keeps sending response.create with its growing input,
// calling `bash` {"command":"make build"} and getting the same failing
// output every time, until the model stops calling functions, the socket
// fails or MAX_TURNS is reached.
//
// Usage: node socket.mjs BASE_URL SESSION [MAX_TURNS]
//   BASE_URL   e.g. http://127.0.0.1:8787/v1 (the client makes it ws://)
//   SESSION    sent as X-Session-ID on the upgrade
//   MAX_TURNS  upper bound on turns (default 10)
//
// Output (stdout, one JSON object): {"turns":[{"status","content",
// "tool_calls","error"}],"closed":{"code","reason"}|null}. "status" is the
// response's status from response.completed (or the terminal event's type),
// "content" its output text (the output_text deltas, checked against the
// completed response), "tool_calls" its function_call items as
// {id: call_id, name, arguments}. Errors are reported, never thrown, so the
// Go side always gets JSON.
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { functionCalls, instructions, messageText, newInput, runTurns, tools } from './responses_agent.mjs';

const [baseURL, session, maxTurnsArg] = process.argv.slice(2);
if (!baseURL || !session) {
  process.stderr.write('usage: node socket.mjs BASE_URL SESSION [MAX_TURNS]\n');
  process.exit(2);
}
const maxTurns = Number(maxTurnsArg || 10);

const client = new OpenAI({ baseURL, apiKey: 'sk-e2e', maxRetries: 0, timeout: 15000 });
const ws = new ResponsesWS(client, { headers: { 'X-Session-ID': session } });
const messages = ws.stream();
let closed = null;

const input = newInput();

// next returns the next server event, null once the socket closed.
async function next() {
  for (;;) {
    const { value, done } = await messages.next();
    if (done) return null;
    switch (value.type) {
      case 'message':
        return value.message;
      case 'close':
        closed = { code: value.code, reason: value.reason };
        return null;
      case 'error':
        throw value.error;
    }
  }
}

async function turn() {
  const out = { status: null, content: '', tool_calls: [], error: null };
  try {
    ws.send({ type: 'response.create', model: 'fake-model', instructions, input, tools });
    let text = '';
    for (;;) {
      const ev = await next();
      if (ev === null) throw new Error('the socket closed before the response ended');
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'error') throw new Error(`error event: ${ev.message ?? JSON.stringify(ev.error)}`);
      if (ev.type === 'response.failed' || ev.type === 'response.incomplete') {
        out.status = ev.type;
        break;
      }
      if (ev.type === 'response.completed') {
        const final = ev.response;
        const done = messageText(final);
        if (done !== text) throw new Error(`streamed text ${JSON.stringify(text)} differs from the completed response's ${JSON.stringify(done)}`);
        out.status = final.status;
        out.tool_calls = functionCalls(final);
        break;
      }
    }
    out.content = text;
  } catch (err) {
    out.error = { name: err?.constructor?.name || 'Error', message: String(err?.message ?? err) };
  }
  return out;
}

const turns = await runTurns(turn, input, maxTurns);
ws.close({ code: 1000, reason: 'done' });
process.stdout.write(JSON.stringify({ turns, closed }) + '\n');
process.exit(0);
