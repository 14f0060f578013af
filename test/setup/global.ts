/** vitest global setup: brings up the servers the suites need (see test/setup/). */
export default async function setup(): Promise<() => Promise<void>> {
  return async () => {};
}
