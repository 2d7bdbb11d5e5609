// Test-only DSH host plugin (tests/browser/test_dsh_autostart.py). GET /dsh-gpu-test-tools/execute
// ?name=TOOL&args=JSON runs the tool through ctx.tools.execute, i.e. DSH's whole tool pipeline
// (pre-execute, guards, execute, post-execute, output validation and rendering), exactly as the
// agent loop does for a model's tool call, and answers the ToolExecutionResult as JSON.
// GET /dsh-gpu-test-tools/schemas lists the tool schemas the registry shows the model.
export const name = 'dsh-gpu-test-tool-runner'
export const inject = ['webServer', 'tools']
export const Config = { '~standard': { version: 1, vendor: name, validate: (value) => ({ value: value ?? {} }) } }

let calls = 0

function send(res, status, body) {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text) })
  res.end(text)
}

export function apply(ctx) {
  const handler = async (req, res) => {
    try {
      const u = new URL(req.url || '/', 'http://127.0.0.1')
      if (u.pathname === '/dsh-gpu-test-tools/schemas') {
        return send(res, 200, { tools: ctx.tools.schemas().map((s) => ({ name: s.name, description: s.description, parameters: s.parameters })) })
      }
      if (u.pathname !== '/dsh-gpu-test-tools/execute') return send(res, 404, { error: 'not-found' })
      const toolName = u.searchParams.get('name') || ''
      const args = JSON.parse(u.searchParams.get('args') || '{}')
      calls += 1
      const result = await ctx.tools.execute({
        callId: `dsh-gpu-test-${calls}`,
        name: toolName,
        arguments: args,
        signal: AbortSignal.timeout(20000),
      })
      return send(res, 200, {
        isError: result.isError,
        value: result.isError ? null : result.value,
        content: result.content,
        error: result.isError ? result.error : null,
      })
    } catch (err) {
      return send(res, 500, { error: String((err && err.stack) || err) })
    }
  }
  ctx.effect(() => ctx.webServer.register({ kind: 'prefix', path: '/dsh-gpu-test-tools', handler }), 'test tool runner route')
}

export default { name, inject, Config, apply }
