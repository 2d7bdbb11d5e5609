// A stand-in for react in tests that render components without React (with jsx-shim.mjs): the hooks
// of modules bundled beside the rendered components exist, and do nothing.
export const useState = (init) => [typeof init === 'function' ? init() : init, () => {}]
export const useEffect = () => {}
export const useLayoutEffect = () => {}
export const useRef = (v) => ({ current: v })
export const useMemo = (f) => f()
export const useCallback = (f) => f
export const useSyncExternalStore = (_subscribe, get) => get()
export default { useState, useEffect, useLayoutEffect, useRef, useMemo, useCallback, useSyncExternalStore }
