// dom.js — the page's two DOM helpers (no framework): h() builds elements, richText() renders
// `backtick` spans as <code> (never as HTML).

export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'style') e.setAttribute('style', v);
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

export function richText(text) {
  const parts = String(text || '').split('`');
  return parts.map((p, i) => (i % 2 ? h('code', { text: p }) : document.createTextNode(p)));
}
