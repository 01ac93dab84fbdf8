"""Seed 002's texts (Zen's tool contract) in one place: validation messages, statuses, instructions.

The messages the seed lists are reproduced verbatim; the instruction payloads (challenge,
apilookup, role prompts, the chat trailer) are written in relay's own words.
"""

from __future__ import annotations

from relay.errors import RelayError, invalid

# Zen's MCP_PROMPT_SIZE_LIMIT: longer step text must travel as files.
STEP_CHAR_LIMIT = 60_000

CONFIDENCE_LEVELS = ("exploring", "low", "medium", "high", "very_high", "almost_certain", "certain")
STANCES = ("for", "against", "neutral")
REVIEW_TYPES = ("full", "security", "performance", "quick")
SEVERITY_FILTERS = ("critical", "high", "medium", "low", "all")
REVIEW_VALIDATION_TYPES = ("external", "internal")
BUILTIN_ROLES = ("default", "planner", "codereviewer")


def absolute_paths_error(received: str) -> RelayError:
    return invalid(
        "Error: All file paths must be FULL absolute paths to real files / folders - DO NOT SHORTEN. "
        f"Received: {received[:300]}",
        "pass full absolute paths, e.g. /home/me/project/src/app.py",
    )


def image_form_error(received: str) -> RelayError:
    return invalid(
        "Error: each image must be a FULL absolute path, a data URL (data:image/png;base64,...) or base64-encoded "
        f"png, jpeg, gif or webp data. Received: {received[:300]}",
        "pass the image's absolute path, or its bytes as base64",
    )


def working_directory_not_absolute(received: str) -> RelayError:
    return invalid(
        "Error: 'working_directory_absolute_path' must be an absolute path (you may use '~' which will be "
        f"expanded). Received: {received[:300]}",
        "pass the project's absolute directory, e.g. /home/me/project",
    )


def working_directory_missing(received: str) -> RelayError:
    return invalid(
        f"Error: 'working_directory_absolute_path' must reference an existing directory. Received: {received[:300]}",
        "create the directory first or pass an existing one",
    )


def step_too_long() -> RelayError:
    return invalid(
        "Step instructions are too long. Please use shorter instructions and provide detailed context via "
        "file paths instead.",
        f"keep step under {STEP_CHAR_LIMIT} characters; put long material in files and list them in relevant_files",
    )


CONSENSUS_MODELS_REQUIRED = (
    "Add 'models' field in Step 1 with at least 2 model configurations.\n"
    "Step 1 requires 'models' field to specify which models to consult.\n"
    "Example:\n"
    "models=[\n"
    "  {'model':'gemini-2.5-pro','stance':'for'},\n"
    "  {'model':'gemini-2.5-flash','stance':'against'}\n"
    "]"
)


def consensus_models_required() -> RelayError:
    return invalid(CONSENSUS_MODELS_REQUIRED, "list at least 2 entries in models at step 1")


def consensus_duplicate(model: str, stance: str) -> RelayError:
    return invalid(
        f"Duplicate model + stance combination found: {model} with stance '{stance}'. "
        "Each model + stance combination must be unique.",
        "give the same model different stances, or consult different models",
    )


def codereview_files_required() -> RelayError:
    return invalid(
        "Add 'relevant_files' field in Step 1 to specify code files or directories to review.\n"
        "Step 1 requires 'relevant_files' field to specify code files or directories to review.\n"
        'Example: relevant_files=["/mnt/d/project/src/api/router.py"]',
        "list the absolute paths of the files or folders under review in relevant_files",
    )


def planner_missing(field: str, because: str) -> RelayError:
    return invalid(
        f"'{field}' is required when {because}",
        f"pass {field}, or drop {because.split('=')[0]}",
    )


def at_least_one(field: str) -> RelayError:
    return invalid(f"{field} must be at least 1", f"pass {field} >= 1")


# clink: the seed's remedy texts (relay's strict-argument error carries them for clink).
CLINK_NO_WORKING_DIRECTORY = (
    "Remove 'working_directory' parameter.\n"
    "clink tool does not support working directory configuration.\n"
    "The CLI will run in the current directory automatically."
)
CLINK_NO_MODEL_PARAMS = (
    "Remove 'model', 'temperature', 'thinking_mode' parameters.\n"
    "clink uses CLinkRequest (not ToolRequest), these fields are not supported."
)
CLINK_NO_ARGS = (
    "Remove 'args' parameter.\n"
    "clink does not accept CLI arguments: relay adds the flags each CLI needs (such as --skip-git-repo-check)."
)
CLINK_EMPTY_PROMPT = (
    "'prompt' parameter must be a non-empty string.\n"
    "Cannot pass empty string or null value.\n"
    'Example: prompt="Ask codex to review src/api/router.py"'
)

CLINK_REMEDIES: dict[str, str] = {
    "working_directory": CLINK_NO_WORKING_DIRECTORY,
    "working_directory_absolute_path": CLINK_NO_WORKING_DIRECTORY,
    "model": CLINK_NO_MODEL_PARAMS,
    "temperature": CLINK_NO_MODEL_PARAMS,
    "thinking_mode": CLINK_NO_MODEL_PARAMS,
    "args": CLINK_NO_ARGS,
}


def clink_unknown_arguments(unknown: list[str], valid: list[str]) -> RelayError:
    """The seed's remedy for each known mistake, else the list of valid names."""
    remedies = list(dict.fromkeys(CLINK_REMEDIES[name] for name in unknown if name in CLINK_REMEDIES))
    others = [name for name in unknown if name not in CLINK_REMEDIES]
    if others:
        remedies.append(f"Unknown parameter(s) for clink: {', '.join(others)}. Valid: {', '.join(valid)}.")
    return invalid("\n\n".join(remedies), f"call clink with only: {', '.join(valid)}")


def clink_empty_prompt() -> RelayError:
    return invalid(CLINK_EMPTY_PROMPT, "pass the request for the CLI as prompt")


CHAT_SYSTEM_PROMPT = (
    "You are a senior engineer thinking alongside another AI agent that is working on a user's task. "
    "Give a direct, well-reasoned answer: challenge weak assumptions, point out risks and simpler options, "
    "and cite file paths and line numbers when you refer to code you were shown. "
    "When you propose substantial new code, put the complete code inside one "
    "<GENERATED-CODE>...</GENERATED-CODE> block so the agent can apply it."
)

CHAT_TRAILER = (
    "\n\n---\n\nAGENT'S TURN: Evaluate this perspective alongside your analysis to form a comprehensive "
    "solution and continue with the user's request and task at hand."
)

GENERATED_CODE_FILE = "zen_generated.code"


def generated_code_note(path: str) -> str:
    return (
        f"The model proposed code; it was saved to {path}. Read that file, check each change critically, "
        "apply what holds up, and then delete the file."
    )


CHALLENGE_WRAPPER = (
    "CRITICAL REASSESSMENT – Do not automatically agree:\n\n"
    '"{statement}"\n\n'
    "Examine this statement on its merits before you answer. Is it correct, complete and well-supported? "
    "Look for flawed reasoning, missing evidence, edge cases and better alternatives. If it holds up, say "
    "so and explain why; if it does not, say exactly where it fails. Agreement must come from analysis, "
    "not from politeness."
)

CHALLENGE_INSTRUCTIONS = (
    "Present your critical reassessment of the statement to the user. Support agreement or disagreement "
    "with specific reasons; do not simply defer to it."
)

APILOOKUP_INSTRUCTIONS = (
    "Look this up on the web now, in a separate sub-task so the search results do not crowd your context:\n"
    "1. Find the current version or release of the API, SDK or library named in the request (today's date "
    "matters: prefer sources from the last months).\n"
    "2. Run 2 to 4 focused searches: official documentation, changelog or release notes, migration guides, "
    "and known issues.\n"
    "3. Prefer official sources over blogs; note the version each fact applies to.\n"
    "4. Answer with the exact signatures, parameters, deprecations and a short example.\n"
    "Do not call apilookup again for this same request: the searching is yours to do."
)

ROLE_PROMPTS: dict[str, str] = {
    "default": (
        "You are an external coding agent consulted by another AI agent. You can read the repository in your "
        "working directory. Answer the request concisely in Markdown, cite files as path:line, and say what "
        "you checked and what you could not verify."
    ),
    "planner": (
        "You are a planning specialist consulted by another AI agent. Break the request into ordered phases "
        "with concrete steps, dependencies, risks and how to verify each phase. Reply with JSON only: "
        '{"status": "planning_complete", "step_number": 1, "total_steps": N, "plan_summary": "...", '
        '"phases": [{"name": "...", "steps": ["..."], "risks": ["..."]}]}.'
    ),
    "codereviewer": (
        "You are a code reviewer consulted by another AI agent. Review the code the request points to. List "
        "findings ordered by severity (Critical, High, Medium, Low), each with path:line, what is wrong, why "
        "it matters and a concrete fix. End with a short overall assessment."
    ),
}

# Zen's auto mode: each tool's category picks the model when the caller names none.
TOOL_CATEGORIES: dict[str, str] = {
    "chat": "balanced",
    "thinkdeep": "extended_reasoning",
    "codereview": "extended_reasoning",
    "debug": "extended_reasoning",
    "consensus": "extended_reasoning",
    "planner": "extended_reasoning",
}

EXPERT_PROMPTS: dict[str, str] = {
    "codereview": (
        "You are an expert code reviewer validating a review another AI agent carried out step by step. "
        "Check its findings against the code you are given, add what it missed, drop what is wrong. "
        "Order issues by severity (critical, high, medium, low), each with path:line, why it matters and a fix. "
        "Finish with the top priorities."
    ),
    "debug": (
        "You are an expert debugger validating an investigation another AI agent carried out step by step. "
        "Test its hypotheses against the evidence and the code you are given. Name the most likely root cause "
        "with file:line, the minimal fix, how to verify it, and what else could explain the symptoms."
    ),
    "thinkdeep": (
        "You are a senior engineer extending another AI agent's analysis. Challenge its assumptions, find gaps "
        "and risks, weigh alternatives, and give concrete, prioritized recommendations grounded in the context "
        "you are given."
    ),
}

CONSENSUS_STANCE_PROMPTS: dict[str, str] = {
    "for": (
        "You argue FOR the proposal. Build the strongest honest case for it: benefits, how to make it work, "
        "which risks are manageable. If it is truly a bad idea, say so plainly; do not defend the indefensible."
    ),
    "against": (
        "You argue AGAINST the proposal. Find its weaknesses: risks, costs, hidden complexity, better "
        "alternatives. If it is truly sound, acknowledge that; do not oppose for the sake of it."
    ),
    "neutral": (
        "You assess the proposal neutrally: weigh benefits against risks and costs, consider alternatives, and "
        "give a balanced verdict."
    ),
}

CONSENSUS_FORMAT = (
    "Evaluate the proposal below on its own merits; you do not see other reviewers' opinions. "
    "Answer in Markdown with: Verdict (one sentence), Analysis (technical feasibility, value, risks, "
    "alternatives), Confidence (1-10 with a reason), Key takeaways."
)
