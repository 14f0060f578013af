// In the `provcat` executable's bundle, the bare `assert` that CommonJS dependencies require
// (signal-exit, through proper-lockfile) is this: node:assert loads on the first check that
// fails, or on any other use. Loading node:assert costs ~3 ms of CPU, and signal-exit only checks
// that its callback is a function. See scripts/bundle-cli.mjs.
'use strict';
const real = () => require('node:assert');
function assert(...args) {
  return real()(...args);
}
assert.equal = (actual, expected, message) => {
  // Loose equality is what assert.equal checks.
  // biome-ignore lint/suspicious/noDoubleEquals: the same comparison as assert.equal
  if (actual != expected) real().equal(actual, expected, message);
};
module.exports = new Proxy(assert, {
  get: (target, key) => (Object.hasOwn(target, key) ? target[key] : real()[key]),
});
