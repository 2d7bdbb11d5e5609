// A stand-in for react/jsx-runtime in tests: jsx() calls function components at once (they must not use
// hooks) and returns plain element objects; render() turns them into HTML text.
export const Fragment = 'Fragment'

export function jsx(type, props) {
  if (typeof type === 'function') return type(props || {})
  return { type, props: props || {} }
}
export const jsxs = jsx

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
const kebab = (k) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

function attrs(props) {
  let out = ''
  for (const [k, v] of Object.entries(props)) {
    if (k === 'children' || k === 'key' || v === undefined || v === null || v === false || typeof v === 'function') continue
    const name = k === 'className' ? 'class' : k
    const value = k === 'style' ? Object.entries(v).map(([p, x]) => `${kebab(p)}:${x}`).join(';') : v
    out += ` ${name}="${esc(value)}"`
  }
  return out
}

export function render(node) {
  if (node === null || node === undefined || node === false || node === true) return ''
  if (Array.isArray(node)) return node.map(render).join('')
  if (typeof node !== 'object') return esc(node)
  const inner = render(node.props.children)
  if (node.type === Fragment) return inner
  return `<${node.type}${attrs(node.props)}>${inner}</${node.type}>`
}
