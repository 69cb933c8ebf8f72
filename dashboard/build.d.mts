/** Types of build.mjs, for the TypeScript code (the dashboard test) that imports it. */
export declare const DEFAULT_OUT_DIR: string
export declare function buildDashboard(options?: { outDir?: string; minify?: boolean }): Promise<{ outDir: string; script: string; style: string }>
