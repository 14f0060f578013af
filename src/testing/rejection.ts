/**
 * The error a promise rejects with, for assertions on it; a promise that resolves fails the
 * test (saying what it resolved with), so no assertion on the error can pass by accident.
 */
export async function rejection(call: Promise<unknown>): Promise<unknown> {
  return call.then(
    (value) => {
      throw new Error(`expected the call to fail, it gave ${String(value)}`);
    },
    (error: unknown) => error,
  );
}
