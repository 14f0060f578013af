import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // tmp first: its TMPDIR reaches the servers the others start, and it is torn down last.
    globalSetup: ['test/setup/tmp.ts', 'test/setup/global.ts', 'test/setup/azurite.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: 'forks',
    maxWorkers: 2,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
