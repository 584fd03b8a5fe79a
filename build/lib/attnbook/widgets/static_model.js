// A stand-in for the anywidget model on a static page: get/set/on over a plain state object.
function staticModel(state) {
  const handlers = {};
  return {
    get: (key) => state[key],
    set(key, value) {
      state[key] = value;
      for (const f of handlers["change:" + key] || []) f();
    },
    save_changes() {},
    on(event, f) { (handlers[event] ||= []).push(f); },
    off(event) { delete handlers[event]; },
  };
}
