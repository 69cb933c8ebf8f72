import { html } from "htm/preact"
import type { ComponentChildren } from "preact"
import { useEffect, useId, useRef, useState } from "preact/hooks"
import uPlot from "uplot"
import { ApiFailure, type FieldError } from "./api.js"

// ---- formatting (everything user-supplied is rendered as text by Preact; nothing here builds markup) ----

export const time = (iso: string | null) => (iso === null ? "—" : new Date(iso).toLocaleString())
export const ms = (value: number | null) => (value === null ? "—" : `${Math.round(value)} ms`)
export const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error))
export const fieldErrors = (error: unknown): ReadonlyArray<FieldError> => (error instanceof ApiFailure ? error.details : [])

export const href = (...parts: Array<string>) => `#/${parts.map(encodeURIComponent).join("/")}`

// ---- a modal dialog: focus moves in, Tab stays in, Escape closes, focus returns to the opener ----

export const Dialog = (props: {
  title: string
  open: boolean
  onClose: () => void
  children: ComponentChildren
  labelledBy?: string
}) => {
  const ref = useRef<HTMLDialogElement>(null)
  const opener = useRef<Element | null>(null)
  const titleId = useId()
  useEffect(() => {
    const dialog = ref.current
    if (dialog === null) return
    if (props.open && !dialog.open) {
      opener.current = document.activeElement
      dialog.showModal()
      // The first field, not the close button: the dialog is there to be filled in.
      const first =
        dialog.querySelector<HTMLElement>("[autofocus]") ??
        dialog.querySelector<HTMLElement>("input:not([disabled]), select, textarea") ??
        dialog.querySelector<HTMLElement>(".modal-body button, button")
      first?.focus()
    } else if (!props.open && dialog.open) {
      dialog.close()
    }
  }, [props.open])
  useEffect(() => {
    const dialog = ref.current
    if (dialog === null) return
    const restore = () => {
      const target = opener.current
      opener.current = null
      if (target instanceof HTMLElement && target.isConnected) target.focus()
    }
    // Escape: the browser fires `cancel`; the state closes the dialog, which then returns focus.
    const cancel = (event: Event) => {
      event.preventDefault()
      props.onClose()
    }
    dialog.addEventListener("close", restore)
    dialog.addEventListener("cancel", cancel)
    return () => {
      dialog.removeEventListener("close", restore)
      dialog.removeEventListener("cancel", cancel)
    }
  }, [props.onClose])
  const trap = (event: KeyboardEvent) => {
    if (event.key !== "Tab" || ref.current === null) return
    const focusable = [...ref.current.querySelectorAll<HTMLElement>("input, select, textarea, button, a[href]")].filter(
      (element) => !element.hasAttribute("disabled") && element.offsetParent !== null
    )
    const first = focusable[0]
    const last = focusable[focusable.length - 1]
    if (first === undefined || last === undefined) return
    if (event.shiftKey && document.activeElement === first) {
      event.preventDefault()
      last.focus()
    } else if (!event.shiftKey && document.activeElement === last) {
      event.preventDefault()
      first.focus()
    }
  }
  return html`<dialog ref=${ref} class="modal" aria-labelledby=${titleId} onKeyDown=${trap}>
    <div class="modal-head">
      <h2 id=${titleId}>${props.title}</h2>
      <button type="button" class="icon" aria-label="Close dialog" onClick=${props.onClose}>×</button>
    </div>
    ${props.open ? props.children : null}
  </dialog>`
}

/** A confirmation step before something that cannot be undone. */
export const Confirm = (props: {
  open: boolean
  title: string
  message: string
  confirmLabel: string
  onConfirm: () => void
  onCancel: () => void
}) => html`<${Dialog} title=${props.title} open=${props.open} onClose=${props.onCancel}>
  <p>${props.message}</p>
  <div class="actions">
    <button type="button" class="danger" onClick=${props.onConfirm}>${props.confirmLabel}</button>
    <button type="button" onClick=${props.onCancel}>Cancel</button>
  </div>
<//>`

/** A field with its label, optional hint, and the API's error for it beside it. */
export const Field = (props: {
  id: string
  label: string
  hint?: string
  errors: ReadonlyArray<FieldError>
  field: string
  children: (describedBy: string | undefined, invalid: boolean) => ComponentChildren
}) => {
  const error = props.errors.find((detail) => detail.field === props.field)
  const hintId = props.hint !== undefined ? `${props.id}-hint` : undefined
  const errorId = error !== undefined ? `${props.id}-error` : undefined
  const describedBy = [hintId, errorId].filter(Boolean).join(" ") || undefined
  return html`<div class=${error !== undefined ? "field invalid" : "field"}>
    <label for=${props.id}>${props.label}</label>
    ${props.children(describedBy, error !== undefined)}
    ${props.hint !== undefined ? html`<p class="hint" id=${hintId}>${props.hint}</p>` : null}
    ${error !== undefined ? html`<p class="field-error" id=${errorId} role="alert">${error.message}</p>` : null}
  </div>`
}

/** A general error line for failures no field explains. */
export const ErrorLine = (props: { error: unknown; fields?: ReadonlyArray<string> }) => {
  if (props.error === null || props.error === undefined) return null
  const details = fieldErrors(props.error)
  if (props.fields !== undefined && details.length > 0 && details.every((detail) => props.fields!.includes(detail.field))) return null
  return html`<p class="error" role="alert">${errorText(props.error)}</p>`
}

export const CopyButton = (props: { text: string; label?: string }) => {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(props.text)
      setCopied(true)
    } catch {
      setCopied(false)
    }
  }
  return html`<button type="button" onClick=${copy}>${copied ? "Copied" : (props.label ?? "Copy")}</button>`
}

/** A secret shown in full, once, with a copy button. */
export const SecretOnce = (props: { label: string; secret: string; testId: string }) =>
  html`<div class="secret" data-testid=${props.testId}>
    <p><strong>${props.label}</strong></p>
    <p><code class="secret-value">${props.secret}</code> <${CopyButton} text=${props.secret} /></p>
    <p class="hint">Copy it now: it will not be shown again. After a reload only its last four characters are shown.</p>
  </div>`

// ---- charts (uPlot) ----

export const Chart = (props: { options: Omit<uPlot.Options, "width" | "height">; data: uPlot.AlignedData; height?: number; label: string }) => {
  const container = useRef<HTMLDivElement>(null)
  const chart = useRef<uPlot | null>(null)
  const height = props.height ?? 220
  useEffect(() => {
    const element = container.current
    if (element === null) return
    const plot = new uPlot({ ...props.options, width: Math.max(200, element.clientWidth), height }, props.data, element)
    chart.current = plot
    const observer = new ResizeObserver(() => plot.setSize({ width: Math.max(200, element.clientWidth), height }))
    observer.observe(element)
    return () => {
      observer.disconnect()
      plot.destroy()
      chart.current = null
    }
  }, [props.options])
  useEffect(() => {
    chart.current?.setData(props.data)
  }, [props.data])
  return html`<div class="chart" ref=${container} role="img" aria-label=${props.label}></div>`
}

export const barsPath = uPlot.paths.bars!({ size: [0.8, 64], align: 0 })

/** Polls `load` every `everyMs` while the tab is visible; the first load runs at once. */
export const usePoll = (load: (signal: { cancelled: boolean }) => Promise<void>, everyMs: number, deps: ReadonlyArray<unknown>) => {
  useEffect(() => {
    const signal = { cancelled: false }
    let timer: ReturnType<typeof setTimeout> | undefined
    const tick = async () => {
      if (signal.cancelled) return
      if (document.visibilityState !== "hidden") {
        try {
          await load(signal)
        } catch {
          // each view shows its own failures; polling goes on
        }
      }
      if (!signal.cancelled) timer = setTimeout(tick, everyMs)
    }
    void tick()
    return () => {
      signal.cancelled = true
      if (timer !== undefined) clearTimeout(timer)
    }
  }, deps)
}
