/**
 * The Emscripten API of @echogarden/fvad-wasm (libfvad compiled to WebAssembly), as far as
 * callgate uses it. Pointers are byte offsets into the module's heap; `HEAP16` is replaced when
 * the heap grows, so read it afresh rather than keeping a reference.
 */
declare module "@echogarden/fvad-wasm" {
  export interface FvadModule {
    /** A new VAD instance (pointer), or 0 when out of memory. */
    _fvad_new(): number
    _fvad_free(instance: number): void
    _fvad_reset(instance: number): void
    /** 0 (quality) to 3 (very aggressive); returns -1 for an invalid mode. */
    _fvad_set_mode(instance: number, mode: number): number
    /** 8000, 16000, 32000 or 48000; returns -1 otherwise. */
    _fvad_set_sample_rate(instance: number, rate: number): number
    /** 1 voiced, 0 not, -1 for a frame length other than 10, 20 or 30 ms. */
    _fvad_process(instance: number, samples: number, length: number): number
    _malloc(bytes: number): number
    _free(pointer: number): void
    HEAP16: Int16Array
  }
  const createFvad: (moduleArg?: Record<string, unknown>) => Promise<FvadModule>
  export default createFvad
}
