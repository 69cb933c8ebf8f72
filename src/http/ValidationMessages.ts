import { Option, ParseResult, SchemaAST as AST } from "effect"

/**
 * Validation errors in one house style (docs/api.md, "Errors"): the field, what is wrong, what is
 * allowed: `name must not be empty`, `status must be one of queued, ringing, active, completed, failed, timeout`,
 * `limit must be an integer from 1 to 100`, `colour is not a known field`. Messages are read from
 * the failing schema (its `message` annotation when it has one, else its kind and constraints),
 * never from the library's wording.
 */
export interface FieldProblem {
  readonly field: string
  readonly message: string
}

const show = (value: unknown) => (typeof value === "string" ? value : JSON.stringify(value))

/** The schema's own message annotation, when it gives a plain one. */
const annotated = (ast: AST.AST, issue: ParseResult.ParseIssue): string | undefined => {
  const annotation = AST.getMessageAnnotation(ast)
  if (Option.isNone(annotation)) return undefined
  const out = annotation.value(issue)
  if (typeof out === "string") return out
  if (typeof out === "object" && out !== null && "message" in out && typeof out.message === "string") return out.message
  return undefined
}

const withoutUndefined = (types: ReadonlyArray<AST.AST>) => types.filter((type) => type._tag !== "UndefinedKeyword")

/** The literal values a union of literals allows, or none when it is not one. */
const literals = (ast: AST.AST): Array<unknown> | undefined => {
  if (ast._tag === "Literal") return [ast.literal]
  if (ast._tag !== "Union") return undefined
  const values: Array<unknown> = []
  for (const member of withoutUndefined(ast.types)) {
    const inner = literals(member)
    if (inner === undefined) return undefined
    values.push(...inner)
  }
  return values
}

/** What a schema accepts, as "must ..." words, from its kind and JSON Schema constraints. */
const expected = (ast: AST.AST): string => {
  const own = AST.getMessageAnnotation(ast)
  if (Option.isSome(own)) {
    const text = own.value({} as never)
    if (typeof text === "string") return text
  }
  const values = literals(ast)
  if (values !== undefined) {
    if (values.length === 1) return values[0] === null ? "must be null" : `must be ${show(values[0])}`
    return `must be one of ${values.map((value) => (value === null ? "null" : show(value))).join(", ")}`
  }
  switch (ast._tag) {
    case "StringKeyword":
      return "must be a string"
    case "NumberKeyword":
      return "must be a number"
    case "BooleanKeyword":
      return "must be true or false"
    case "TypeLiteral":
      return "must be a JSON object"
    case "TupleType":
      return "must be an array"
    case "Refinement":
      return constraint(ast) ?? expected(ast.from)
    case "Transformation":
      return expected(ast.to)
    case "Union": {
      const members = withoutUndefined(ast.types)
      if (members.length === 1) return expected(members[0]!)
      const nullable = members.some((m) => m._tag === "Literal" && m.literal === null)
      const rest = members.filter((m) => !(m._tag === "Literal" && m.literal === null))
      if (nullable && rest.length === 1) return `${expected(rest[0]!)} or null`
      return members.map(expected).join(", or ")
    }
    default:
      return "has the wrong type"
  }
}

/** A refinement's constraint in words, from its JSON Schema annotation (minLength and the like). */
const constraint = (ast: AST.Refinement): string | undefined => {
  const json = AST.getJSONSchemaAnnotation(ast).pipe(Option.getOrUndefined) as Record<string, unknown> | undefined
  if (json === undefined) return undefined
  const n = (key: string) => json[key] as number
  if (json.minLength === 1) return "must not be empty"
  if ("minLength" in json) return `must be at least ${n("minLength")} characters long`
  if ("maxLength" in json) return `must be at most ${n("maxLength")} characters long`
  if (json.minItems === 1) return "must not be empty"
  if ("minItems" in json) return `must have at least ${n("minItems")} items`
  if ("maxItems" in json) return `must have at most ${n("maxItems")} items`
  if (json.type === "integer") return "must be an integer"
  if ("minimum" in json && "maximum" in json) return `must be from ${n("minimum")} to ${n("maximum")}`
  if ("minimum" in json) return `must be at least ${n("minimum")}`
  if ("maximum" in json) return `must be at most ${n("maximum")}`
  if ("exclusiveMinimum" in json) return `must be greater than ${n("exclusiveMinimum")}`
  if ("exclusiveMaximum" in json) return `must be less than ${n("exclusiveMaximum")}`
  if ("pattern" in json) return `must match ${String(json.pattern)}`
  return undefined
}

const isAbsentOrNull = (ast: AST.AST) => ast._tag === "UndefinedKeyword" || (ast._tag === "Literal" && ast.literal === null)

/** The message a filter gave (a predicate returning a string) on the innermost Type issue, if any. */
const filterMessage = (issue: ParseResult.ParseIssue): string | undefined =>
  issue._tag === "Type" ? issue.message : issue._tag === "Refinement" ? filterMessage(issue.issue) : undefined

/** The message for one failure at a field. */
const leafMessage = (issue: ParseResult.ParseIssue): string => {
  switch (issue._tag) {
    case "Missing":
      return "is required"
    case "Unexpected":
      return "is not a known field"
    case "Forbidden":
      return "could not be checked"
    case "Type":
      return annotated(issue.ast, issue) ?? issue.message ?? expected(issue.ast)
    case "Refinement":
      return annotated(issue.ast, issue) ?? filterMessage(issue.issue) ?? constraint(issue.ast) ?? expected(issue.ast.from)
    default:
      return "is not valid"
  }
}

/** Walks the issue tree down to the failures, one list entry per failure with its path. */
const collect = (issue: ParseResult.ParseIssue, path: ReadonlyArray<PropertyKey>, out: Array<{ path: ReadonlyArray<PropertyKey>; message: string }>) => {
  switch (issue._tag) {
    case "Pointer":
      return collect(issue.issue, [...path, ...(Array.isArray(issue.path) ? issue.path : [issue.path as PropertyKey])], out)
    case "Composite": {
      // A union that failed as a whole (an optional or nullable field, a set of literals) is one
      // problem described by the union; a struct or array lists each member's problems.
      const issues = Array.isArray(issue.issues) ? issue.issues : [issue.issues as ParseResult.ParseIssue]
      if (issue.ast._tag === "Union") {
        const own = annotated(issue.ast, issue)
        if (own !== undefined) return void out.push({ path, message: own })
        // An optional or nullable field: the problem is the one with the real member (`null` and
        // "absent" are the alternatives, not the point).
        const present = issues.filter((inner) => !("ast" in inner) || inner.ast._tag !== "UndefinedKeyword")
        const nonNull = present.filter((inner) => !("ast" in inner) || !isAbsentOrNull(inner.ast))
        const real = nonNull.length > 0 ? nonNull : present
        const only = real.length === 1 ? real[0]! : issues.length === 1 ? issues[0]! : undefined
        if (only !== undefined) return collect(only, path, out)
        if (literals(issue.ast) !== undefined) return void out.push({ path, message: expected(issue.ast) })
        return void out.push({ path, message: expected(issue.ast) })
      }
      for (const inner of issues) collect(inner, path, out)
      return
    }
    case "Refinement": {
      // A refinement's own message describes everything it allows ("must be an integer from 1
      // to 100"), so it also answers for a failure of what it refines ("abc", 1.5).
      const own = annotated(issue.ast, issue)
      if (own !== undefined) return void out.push({ path, message: own })
      if (issue.kind === "From") return collect(issue.issue, path, out)
      return void out.push({ path, message: leafMessage(issue) })
    }
    case "Transformation": {
      const own = annotated(issue.ast, issue)
      if (own !== undefined) return void out.push({ path, message: own })
      // "5" for a number field read from a query string: say what the field must be, not the step.
      if (issue.kind === "Encoded" && issue.issue._tag === "Type") return void out.push({ path, message: expected(issue.ast) })
      return collect(issue.issue, path, out)
    }
    default:
      return void out.push({ path, message: leafMessage(issue) })
  }
}

/**
 * One problem per field (the first found), named by its path (`body`, `query` or `params` when
 * the whole value is wrong).
 */
export const fieldProblems = (where: "body" | "query" | "params", error: ParseResult.ParseError): Array<FieldProblem> => {
  const found: Array<{ path: ReadonlyArray<PropertyKey>; message: string }> = []
  collect(error.issue, [], found)
  const seen = new Set<string>()
  return found.flatMap(({ path, message }) => {
    const field = path.length > 0 ? path.map(String).join(".") : where
    if (seen.has(field)) return []
    seen.add(field)
    return [{ field, message }]
  })
}
