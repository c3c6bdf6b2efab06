// What the looping Responses agents (apis.mjs over HTTP, socket.mjs over the
// WebSocket) share: the bash tool, the failing result they always get, the
// input they start from and grow, and how they read a completed response.

export const tools = [{
  type: 'function',
  name: 'bash',
  description: 'Run a shell command',
  parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  strict: false,
}];

export const instructions = 'You are a coding agent. Use the bash tool.';

const failing = "make: *** No rule to make target 'build'.  Stop.\nexit code 2";

// newInput is the agent's input before its first turn.
export function newInput() {
  return [{ role: 'user', content: 'Build the project and fix any error.' }];
}

// messageText is the output text of a completed response's message items.
export function messageText(response) {
  return response.output.filter((it) => it.type === 'message')
    .flatMap((it) => it.content).filter((p) => p.type === 'output_text').map((p) => p.text).join('');
}

// functionCalls are a completed response's function_call items as
// {id: call_id, name, arguments}.
export function functionCalls(response) {
  return response.output.filter((it) => it.type === 'function_call')
    .map((it) => ({ id: it.call_id, name: it.name, arguments: it.arguments }));
}

// runTurns plays up to maxTurns turns, each appending its calls and their
// failing results to input, until a turn fails or calls nothing.
export async function runTurns(turn, input, maxTurns) {
  const turns = [];
  for (let i = 0; i < maxTurns; i++) {
    const t = await turn();
    turns.push(t);
    if (t.error || t.tool_calls.length === 0) break;
    for (const c of t.tool_calls) {
      input.push({ type: 'function_call', call_id: c.id, name: c.name, arguments: c.arguments });
      input.push({ type: 'function_call_output', call_id: c.id, output: failing });
    }
  }
  return turns;
}
