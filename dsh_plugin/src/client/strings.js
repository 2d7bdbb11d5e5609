// Strings that only the DSH plugin shows (settings page, glance card chrome, error card).
// Everything the standalone page also shows comes from the shared catalogue through
// sidecar/static/format.js (t, statusText, ...): see tr() below, which looks here first and
// then falls back to the shared catalogue.
import { t as sharedT, normLang } from '../../../sidecar/static/format.js'

const en = {
  'plugin.name': 'GPU dashboard',
  'plugin.viewLabel': 'GPU',
  'chip.title': 'GPU dashboard: {status}. Click for the glance card.',
  'chip.unreachable': 'no sidecar',
  'chip.error': 'error',
  'chip.loading': 'GPU …',
  'glance.title': 'GPU dashboard',
  'glance.close': 'Close',
  'glance.more': 'Open a session and pick the GPU tab for processes and history.',
  'glance.moreWarnings': '+{n} more',
  'glance.noGpus': 'No GPU reported.',
  'view.title': 'Is the model really on the GPU?',
  'error.title': 'The GPU dashboard hit an error',
  'error.body': 'Only this panel is affected; DSH keeps working. Details:',
  'error.hostMissing':
    'The plugin\'s host half did not answer at {path}. Is the "dsh-gpu-dashboard" row enabled in the web profile, and was DSH restarted after `dsh plugin add`?',
  'error.http': 'The sidecar answered HTTP {status}: {detail}',
  'error.auth': 'The sidecar refused the request (HTTP {status}). Check the token in the plugin config.',
  'error.badResponse': 'The sidecar answered something that is not a status document: {detail}',
  'unreachable.url': 'Sidecar URL: {url}',
  'settings.title': 'GPU dashboard',
  'settings.connection': 'Connection',
  'settings.state.ok': 'Connected',
  'settings.state.unreachable': 'Sidecar unreachable',
  'settings.state.error': 'Error',
  'settings.state.loading': 'Connecting…',
  'settings.effectiveUrl': 'Sidecar URL in use (host config)',
  'settings.tokenSet': 'token set',
  'settings.tokenUnset': 'no token',
  'settings.lastUpdate': 'Last data',
  'settings.hostWarnings': 'Host config warnings',
  'settings.test': 'Test now',
  'settings.sidecarUrl': 'Sidecar URL',
  'settings.sidecarUrlHelp':
    'The DSH server talks to the sidecar (the browser never does), so the URL lives in the host config. Remembered in this browser; to apply it, put this in {file} (hot-reloaded in about 3 s):',
  'settings.urlSame': 'This is the URL the host uses.',
  'settings.urlDiffers': 'Not applied yet: the host still uses {url}.',
  'settings.urlNotLoopback': 'Only loopback URLs (127.0.0.1, ::1, localhost) are accepted; the host would fall back to {def}.',
  'settings.urlInvalid': 'Not a valid http:// URL.',
  'settings.copy': 'Copy',
  'settings.copied': 'Copied',
  'settings.refresh': 'Refresh interval',
  'settings.refreshHelp': 'How often this browser asks for a new status ({min}–{max} s). Stored in this browser.',
  'settings.seconds': 's',
  'settings.language': 'Language',
  'settings.langAuto': 'Same as DSH',
  'settings.save': 'Save',
  'settings.saved': 'Saved',
  'settings.startSidecar': 'Start the sidecar',
  'settings.version': 'Plugin {version} · DSH {dsh}',
}

const zh = {
  'plugin.name': 'GPU 面板',
  'plugin.viewLabel': 'GPU',
  'chip.title': 'GPU 面板：{status}。点击查看概览卡片。',
  'chip.unreachable': '无 sidecar',
  'chip.error': '出错',
  'chip.loading': 'GPU …',
  'glance.title': 'GPU 面板',
  'glance.close': '关闭',
  'glance.more': '打开一个会话并选择 GPU 标签页，可查看进程和历史曲线。',
  'glance.moreWarnings': '还有 {n} 条',
  'glance.noGpus': '没有报告任何 GPU。',
  'view.title': '模型真的在 GPU 上吗？',
  'error.title': 'GPU 面板出错了',
  'error.body': '只影响本面板，DSH 其余部分照常工作。详情：',
  'error.hostMissing':
    '插件的服务端部分在 {path} 没有响应。web 配置中的 "dsh-gpu-dashboard" 行是否启用？执行 `dsh plugin add` 后是否重启了 DSH？',
  'error.http': 'sidecar 返回 HTTP {status}：{detail}',
  'error.auth': 'sidecar 拒绝了请求（HTTP {status}）。请检查插件配置中的 token。',
  'error.badResponse': 'sidecar 返回的不是状态文档：{detail}',
  'unreachable.url': 'Sidecar 地址：{url}',
  'settings.title': 'GPU 面板',
  'settings.connection': '连接',
  'settings.state.ok': '已连接',
  'settings.state.unreachable': '无法连接 sidecar',
  'settings.state.error': '出错',
  'settings.state.loading': '连接中…',
  'settings.effectiveUrl': '当前使用的 Sidecar 地址（服务端配置）',
  'settings.tokenSet': '已设置 token',
  'settings.tokenUnset': '未设置 token',
  'settings.lastUpdate': '最近数据',
  'settings.hostWarnings': '服务端配置警告',
  'settings.test': '立即测试',
  'settings.sidecarUrl': 'Sidecar 地址',
  'settings.sidecarUrlHelp':
    '由 DSH 服务端访问 sidecar（浏览器不直接访问），因此地址保存在服务端配置中。此处的值只记在本浏览器；要生效，请把下面内容写入 {file}（约 3 秒后自动重新加载）：',
  'settings.urlSame': '这就是服务端正在使用的地址。',
  'settings.urlDiffers': '尚未生效：服务端仍在使用 {url}。',
  'settings.urlNotLoopback': '只接受回环地址（127.0.0.1、::1、localhost）；否则服务端会退回 {def}。',
  'settings.urlInvalid': '不是有效的 http:// 地址。',
  'settings.copy': '复制',
  'settings.copied': '已复制',
  'settings.refresh': '刷新间隔',
  'settings.refreshHelp': '本浏览器请求新状态的频率（{min}–{max} 秒），保存在本浏览器中。',
  'settings.seconds': '秒',
  'settings.language': '语言',
  'settings.langAuto': '跟随 DSH',
  'settings.save': '保存',
  'settings.saved': '已保存',
  'settings.startSidecar': '启动 sidecar',
  'settings.version': '插件 {version} · DSH {dsh}',
}

const LOCAL = { en, zh }

/** Plugin-local string first, then the shared catalogue (format.js t()). */
export function tr(lang, key, vars) {
  const l = normLang(lang)
  let s = LOCAL[l][key]
  if (s === undefined) s = LOCAL.en[key]
  if (s === undefined) return sharedT(l, key, vars)
  if (vars) {
    s = s.replace(/\{(\w+)\}/g, (m, name) =>
      Object.prototype.hasOwnProperty.call(vars, name) && vars[name] !== null && vars[name] !== undefined
        ? String(vars[name])
        : m,
    )
  }
  return s
}

export const LOCAL_STRINGS = LOCAL
